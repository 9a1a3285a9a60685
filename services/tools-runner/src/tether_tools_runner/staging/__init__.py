"""Staged effects ("approve the effect, not the command"): a call that needs an operator
runs first against a copy of what it touches; the change set (created, modified and
deleted paths, diffs, digests) goes on the approval card, and approving applies exactly
that set, or nothing when the workspace changed underneath (`stale_effect`).

Owns the change set (`changes`), the staging and apply I/O (`ops`, run as the sandbox
user by the file workers, which import it before they drop root: so this package
imports nothing itself), the shell's scratch copy (`shell`), stored sets (`store`) and
the two operations (`stager`). Never decides whether a call needs approval (the brain
does)."""
