"""Sandbox attestation: probe, once at start, what isolation this host really gives.

Levels, weakest first (each includes the ones before it):

    none      nothing can be limited (no POSIX rlimits)
    rlimits   per-process limits (CPU, memory, file size, processes), a timeout that kills
              the process group, a scrubbed environment; no filesystem or network isolation
    bwrap     bubblewrap really runs `true` here: read-only system, the workspace as the
              only writable place, private /tmp, no network, own PID namespace
    seccomp   bwrap plus the syscall filter of seccomp.py, which bwrap really installed
              here (the probe runs `true` under it)

Other findings are reported as `features`. Those the runner applies are attested by
running a command under them, never assumed: `sandbox_uid` (a file the sandbox writes is
owned on the host by the unprivileged sandbox user), `tmpfs_cap` (the sandbox's /tmp has
the size asked for, and overfilling it is refused and reported), `memory_limit` (a call
over a small per-call memory cgroup is stopped and reported as `memory`) and
`process_limit`. Landlock's ABI and namespaces are only observed."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tether_common.errors import ConfigError

from . import cgroups
from .identity import SandboxUser, hand_over, sandbox_user
from .seccomp import DENIED, program, program_fd

if TYPE_CHECKING:
    from .run import Outcome

LEVELS: tuple[str, ...] = ("none", "rlimits", "bwrap", "seccomp")
_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}


@dataclass(frozen=True, slots=True)
class Attestation:
    level: str
    bwrap: str | None
    features: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    seccomp: bytes | None = None  # the filter bwrap installs, when the level has it
    # Who the sandbox runs as on the host (the runner's own uid when it is not root).
    user: SandboxUser = field(default_factory=sandbox_user)

    def at_least(self, level: str) -> bool:
        return level in LEVELS and LEVELS.index(self.level) >= LEVELS.index(level)


def missing_for(attestation: Attestation, level: str) -> str | None:
    """Why this host cannot give `level`, or None when it can."""
    if level not in LEVELS:
        return f"unknown sandbox level {level!r} (known: {', '.join(LEVELS)})"
    if attestation.at_least(level):
        return None
    reasons = [
        f"{name}: {attestation.problems[name]}"
        for name in LEVELS[LEVELS.index(attestation.level) + 1 : LEVELS.index(level) + 1]
        if name in attestation.problems
    ]
    detail = "; ".join(reasons) or "not available"
    return f"this host gives sandbox level {attestation.level!r}, below {level!r} ({detail})"


@functools.cache
def supports(bwrap: str, flag: str) -> bool:
    """Whether this bubblewrap knows `flag` (`--size` came in 0.7, `--disable-userns` in
    0.8); older ones still sandbox, with what they have, and the attestation says so."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f"{flag} " in done.stdout.decode(errors="replace")


def _become(user: SandboxUser) -> None:
    """preexec_fn of a probe: the sandbox user, as for a real call."""
    if user.drops:
        os.setgroups([])
        os.setresgid(user.gid, user.gid, user.gid)
        os.setresuid(user.uid, user.uid, user.uid)


def _probe_bwrap(path: str | None, user: SandboxUser, filter_fd: int | None = None) -> str | None:
    """None when bubblewrap (with the filter on `filter_fd`) works here, started as the
    sandbox user in its own user namespace, else what went wrong."""
    if path is None:
        return "bwrap is not installed"
    args = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    args += ["--unshare-user", "--uid", str(user.uid), "--gid", str(user.gid)]
    if supports(path, "--disable-userns"):
        args += ["--disable-userns"]
    args += ["--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"]
    if filter_fd is not None:
        args += ["--seccomp", str(filter_fd)]
    fds = (filter_fd,) if filter_fd is not None else ()
    try:
        done = subprocess.run(
            [*args, "true"],
            capture_output=True,
            timeout=10,
            check=False,
            pass_fds=fds,
            cwd="/",
            preexec_fn=lambda: _become(user),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if done.returncode != 0:
        return f"bwrap failed: {done.stderr.decode(errors='replace').strip()[:200]}"
    return None


def _probe_seccomp(bwrap: str, user: SandboxUser) -> tuple[bytes | None, str | None]:
    """(the filter, None) when bwrap installs it here, else (None, why not)."""
    try:
        compiled = program()
    except ConfigError as exc:
        return None, exc.message
    fd = program_fd(compiled)
    try:
        failure = _probe_bwrap(bwrap, user, fd)
    finally:
        os.close(fd)
    return (None, failure) if failure is not None else (compiled, None)


def _landlock_abi() -> str:
    number = _LANDLOCK_CREATE_RULESET.get(platform.machine())
    if number is None or platform.system() != "Linux":
        return "unknown"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = int(libc.syscall(number, None, 0, 1))  # LANDLOCK_CREATE_RULESET_VERSION
    except (OSError, AttributeError):
        return "unknown"
    return str(abi) if abi > 0 else "unavailable"


def _namespaces() -> dict[str, str]:
    found = {}
    for kind in ("user", "net", "pid", "mnt"):
        found[f"{kind}_ns"] = "yes" if os.path.exists(f"/proc/self/ns/{kind}") else "no"
    return found


def pids_cgroup_usable() -> bool:
    return cgroups.hierarchy() is not None


def _process_limit() -> str:
    if pids_cgroup_usable():
        return "per call (cgroup)"
    # RLIMIT_NPROC does not bind root, so only a pids cgroup bounds a fork bomb.
    return "none" if os.geteuid() == 0 else "per process (rlimit)"


def _probe(command: str, candidate: Attestation, workspace: Path, **limits: int) -> Outcome:
    """`command` run exactly as a shell call is, on a thread of its own (attest is
    called from synchronous code and from inside event loops alike)."""
    from .limits import SandboxLimits
    from .run import run_sandboxed  # run.py imports this module

    probe = run_sandboxed(
        command,
        workspace,
        attestation=candidate,
        timeout_s=10,
        limits=SandboxLimits(cpu_s=10, **limits),
    )
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, probe).result()


def _attest_identity(candidate: Attestation, workspace: Path) -> str:
    user = candidate.user
    outcome = _probe("echo made > owner", candidate, workspace)
    owner = (workspace / "owner").lstat().st_uid if (workspace / "owner").exists() else None
    if owner != user.uid:
        raise RuntimeError(f"a file the sandbox wrote is owned by uid {owner}: {outcome.output}")
    if owner == 0:
        raise RuntimeError("the sandbox runs as root")
    return f"{user.uid} (unprivileged; its own user namespace)"


def _attest_tmpfs(candidate: Attestation, workspace: Path) -> str:
    command = "stat -f -c '%b %S' /tmp; head -c 5000000 /dev/zero > /tmp/fill; echo $?"
    outcome = _probe(command, candidate, workspace, tmpfs_mb=4)
    first, *rest = outcome.output.split("\n", 1)
    blocks, size = (int(word) for word in first.split())
    if blocks * size != 4 * 1024 * 1024 or "No space left" not in "".join(rest):
        raise RuntimeError(f"/tmp is not capped at 4 MB: {outcome.output[:200]}")
    if outcome.exceeded == "disk":
        return "one capped tmpfs per call for /tmp and /dev/shm; filling it is reported"
    return "capped tmpfs for /tmp and /dev/shm (bwrap --size); filling it is not reported"


def _attest_memory(candidate: Attestation, workspace: Path) -> str:
    if cgroups.hierarchy() is None:
        raise RuntimeError(
            "per process only (RLIMIT_AS): the runner cannot make cgroups (not root, or no "
            "delegated memory and pids controllers)"
        )
    command = "a=$(head -c 64000000 /dev/zero | tr '\\0' x); echo survived"
    outcome = _probe(command, candidate, workspace, memory_mb=16)
    if outcome.exceeded != "memory" or "survived" in outcome.output:
        raise RuntimeError(f"a call over 16 MB was not stopped: {outcome.output[:200]}")
    version = cgroups.hierarchy()
    return f"per call (cgroup v{version.version if version else '?'})"


def _attest_applied(candidate: Attestation) -> tuple[dict[str, str], dict[str, str]]:
    """The limits and identity the runner applies, each really tried."""
    features, problems = {}, {}
    checks = {
        "sandbox_uid": _attest_identity,
        "tmpfs_cap": _attest_tmpfs,
        "memory_limit": _attest_memory,
    }
    with tempfile.TemporaryDirectory(prefix="tether-attest-") as folder:
        workspace = Path(folder)
        hand_over(workspace, candidate.user)
        for name, check in checks.items():
            try:
                features[name] = check(candidate, workspace)
            except (OSError, RuntimeError, ValueError) as exc:
                features[name] = "missing"
                problems[name] = str(exc)
    return features, problems


def attest(user: SandboxUser | None = None) -> Attestation:
    """Probe this host; takes a few milliseconds plus `bwrap true`, without and with the
    syscall filter, plus a few short sandboxed commands that try the applied limits."""
    user = user or sandbox_user()
    try:
        import resource  # noqa: F401 - absent on non-POSIX hosts

        level, problems = "rlimits", {}
    except ImportError:
        level, problems = "none", {"rlimits": "the resource module is unavailable"}
    bwrap = shutil.which("bwrap")
    failure = _probe_bwrap(bwrap, user) if level == "rlimits" else "needs rlimits"
    compiled: bytes | None = None
    bwrap_works = failure is None and bwrap is not None
    if failure is not None or bwrap is None:
        problems["bwrap"] = failure or "bwrap is not installed"
    else:
        level = "bwrap"
        compiled, why_not = _probe_seccomp(bwrap, user)
        if compiled is not None:
            level = "seccomp"
        else:
            problems["seccomp"] = why_not or "unknown"
    features = {
        **_namespaces(),
        "seccomp": f"{len(DENIED)} syscalls refused" if compiled is not None else "not applied",
        "landlock_abi": _landlock_abi(),
        "cgroup_v2": "yes" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "no",
        "network": "off (always, for now)" if bwrap_works else "not isolated",
        "process_limit": _process_limit(),
    }
    found = Attestation(level, bwrap if bwrap_works else None, features, problems, compiled, user)
    if not bwrap_works:
        return found
    applied, trouble = _attest_applied(found)
    return replace(found, features=features | applied, problems=problems | trouble)


__all__ = ["LEVELS", "Attestation", "attest", "missing_for", "pids_cgroup_usable", "supports"]
