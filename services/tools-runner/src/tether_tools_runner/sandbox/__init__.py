"""The shell sandbox: what isolation this host really gives (`attest`), and running one
command inside it (`run`): bubblewrap namespaces, rlimits, a pids cgroup, a timeout
that kills the whole tree, capped output and a scrubbed environment.

Never decides whether a command may run (that is `tether_common.safety` and the brain);
never falls back to a weaker level than a tool's configured minimum."""

from .attest import LEVELS, Attestation, attest, missing_for
from .limits import SandboxLimits, release_cgroups
from .run import Outcome, run_sandboxed

__all__ = [
    "LEVELS",
    "Attestation",
    "Outcome",
    "SandboxLimits",
    "attest",
    "missing_for",
    "release_cgroups",
    "run_sandboxed",
]
