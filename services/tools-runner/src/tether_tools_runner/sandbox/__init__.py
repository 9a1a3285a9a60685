"""The shell sandbox: what isolation this host really gives (`attest`), and running one
command inside it (`run`): bubblewrap namespaces started as an unprivileged user, a
syscall filter, per-call memory and pids cgroups, a size-capped private tmpfs, rlimits,
a timeout that kills the whole tree, capped output, an environment built from an
allow-list, and git given only a sanitised copy of the repository's config.

Never decides whether a command may run (that is `tether_common.safety` and the brain);
never falls back to a weaker level than a tool's configured minimum."""

from .attest import LEVELS, Attestation, attest, missing_for
from .cgroups import release as release_cgroups
from .identity import SandboxUser, hand_over, sandbox_user
from .limits import SandboxLimits
from .run import Outcome, describe, run_sandboxed

__all__ = [
    "LEVELS",
    "Attestation",
    "Outcome",
    "SandboxLimits",
    "SandboxUser",
    "attest",
    "describe",
    "hand_over",
    "missing_for",
    "release_cgroups",
    "run_sandboxed",
    "sandbox_user",
]
