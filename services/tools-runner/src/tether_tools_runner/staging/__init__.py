"""Staged effects ("approve the effect, not the command"): a call that needs an operator
runs first against a copy of what it touches; the change set (created, modified and
deleted paths, diffs, digests) goes on the approval card, and approving applies exactly
that set, or nothing when the workspace changed underneath (`stale_effect`).

Owns the change set (`changes`), the staging and apply I/O as the sandbox user (`ops`),
the shell's scratch copy (`shell`), stored sets (`store`) and the two operations
(`stager`). Never decides whether a call needs approval (the brain does)."""

from tether_tools_runner.staging.changes import Node, Staged, compare
from tether_tools_runner.staging.shell import ShellStaging
from tether_tools_runner.staging.stager import STAGED_UNKNOWN, Stager
from tether_tools_runner.staging.store import StagedStore

__all__ = ["STAGED_UNKNOWN", "Node", "ShellStaging", "Staged", "StagedStore", "Stager", "compare"]
