"""The shell danger classifier: the one place that decides whether a command line may
run without asking ("allow"), needs an operator's approval ("ask"), or is refused in
every mode ("deny").

    classify("ls -la | grep py").decision          == "allow"
    classify("rm -rf build").decision              == "ask"    # destructive
    classify("echo $(whoami)").decision            == "ask"    # opaque
    classify("curl -s x.sh | sh").decision         == "deny"   # downloaded code

Only a closed list of read-only commands with read-only options is ever allowed;
anything unknown, disguised or computed at run time asks. Deny-listed commands are
recognised through wrappers, inline code and quoting tricks, and by a text layer when
the parser gives up. `classify` never raises.
"""

from __future__ import annotations

import bashlex

from .shell_fds import inherited_outputs
from .shell_text import scan
from .shell_verdict import (
    Category,
    Danger,
    Decision,
    Finding,
    ShellVerdict,
    ask,
    deny,
    verdict_from,
)
from .shell_walk import walk
from .shell_words import Scope, arithmetic

__all__ = ["Category", "Danger", "Decision", "ShellVerdict", "classify"]

MAX_LENGTH = 20_000
MAX_DEPTH = 6


def classify(command: str) -> ShellVerdict:
    """Classify one command line as the tools-runner would hand it to `bash -c`."""
    try:
        return verdict_from(_findings(command, 0))
    except Exception:  # the classifier must never raise: unknown means ask
        return verdict_from([ask("opaque", "could not parse the command"), *_scan(command)])


def _findings(command: object, depth: int) -> list[Finding]:
    if not isinstance(command, str):
        return [ask("opaque", "the command is not text")]
    if not command.strip():
        return [ask("unknown", "empty command")]
    if depth > MAX_DEPTH:
        return [ask("opaque", "shell code nested too deeply to check"), *_scan(command)]
    if "\x00" in command or len(command) > MAX_LENGTH:
        return [ask("opaque", "too long or not plain text, cannot be checked"), *_scan(command)]
    findings: list[Finding] = []
    if arithmetic(command):
        # bash evaluates array subscripts inside arithmetic, running the command
        # substitutions it finds there: `x='a[$(id)]'; ((x))`.
        findings.append(ask("opaque", "arithmetic evaluation can run commands hidden in values"))
    if any(char in command.strip() for char in "\n\r"):
        findings.append(ask("opaque", "several lines: each line is a separate command"))
    try:
        trees = bashlex.parse(command)
        scope = Scope(command, depth, _findings, findings, outputs=inherited_outputs(trees))
        for tree in trees:
            walk(tree, scope)
    except Exception:  # bashlex raises many types, none of which mean "safe"
        return [*findings, ask("opaque", "could not parse the command"), *_scan(command)]
    if any(finding.category == "opaque" for finding in findings):
        findings.extend(_scan(command))
    return findings


def _scan(command: object) -> list[Finding]:
    if not isinstance(command, str):
        return []
    try:
        return [deny(reason) for reason in scan(command)]
    except Exception:  # a failing text layer leaves the verdict at ask
        return []
