"""Sandbox attestation: probe, once at start, what isolation this host really gives.

Levels, weakest first (each includes the ones before it):

    none      nothing can be limited (no POSIX rlimits)
    rlimits   per-process limits (CPU, memory, file size, processes), a timeout that kills
              the process group, a scrubbed environment; no filesystem or network isolation
    bwrap     bubblewrap really runs `true` here: read-only system, the workspace as the
              only writable place, private /tmp, no network, own PID namespace
    seccomp   bwrap plus the syscall filter of seccomp.py, which bwrap really installed
              here (the probe runs `true` under it)

Other findings (Landlock ABI, cgroups, whether the process count is bounded for root) are
reported as detail; they are observed, not applied by the runner."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tether_common.errors import ConfigError

from .seccomp import DENIED, program, program_fd

LEVELS: tuple[str, ...] = ("none", "rlimits", "bwrap", "seccomp")
PIDS_CGROUP_V1 = Path("/sys/fs/cgroup/pids")
_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}


@dataclass(frozen=True, slots=True)
class Attestation:
    level: str
    bwrap: str | None
    features: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    seccomp: bytes | None = None  # the filter bwrap installs, when the level has it

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


def _probe_bwrap(path: str | None, filter_fd: int | None = None) -> str | None:
    """None when bubblewrap (with the filter on `filter_fd`) works here, else what went
    wrong."""
    if path is None:
        return "bwrap is not installed"
    args = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    args += ["--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"]
    if filter_fd is not None:
        args += ["--seccomp", str(filter_fd)]
    fds = (filter_fd,) if filter_fd is not None else ()
    try:
        done = subprocess.run(
            [*args, "true"], capture_output=True, timeout=10, check=False, pass_fds=fds
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if done.returncode != 0:
        return f"bwrap failed: {done.stderr.decode(errors='replace').strip()[:200]}"
    return None


def _probe_seccomp(bwrap: str) -> tuple[bytes | None, str | None]:
    """(the filter, None) when bwrap installs it here, else (None, why not)."""
    try:
        compiled = program()
    except ConfigError as exc:
        return None, exc.message
    fd = program_fd(compiled)
    try:
        failure = _probe_bwrap(bwrap, fd)
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
    return PIDS_CGROUP_V1.is_dir() and os.access(PIDS_CGROUP_V1, os.W_OK)


def _process_limit() -> str:
    if os.geteuid() != 0:
        return "rlimit"
    # RLIMIT_NPROC does not bind root, so only a pids cgroup bounds a fork bomb.
    return "cgroup" if pids_cgroup_usable() else "none"


def attest() -> Attestation:
    """Probe this host; takes a few milliseconds plus `bwrap true`, without and with the
    syscall filter."""
    try:
        import resource  # noqa: F401 - absent on non-POSIX hosts

        level, problems = "rlimits", {}
    except ImportError:
        level, problems = "none", {"rlimits": "the resource module is unavailable"}
    bwrap = shutil.which("bwrap")
    failure = _probe_bwrap(bwrap) if level == "rlimits" else "needs rlimits"
    compiled: bytes | None = None
    bwrap_works = failure is None and bwrap is not None
    if failure is not None or bwrap is None:
        problems["bwrap"] = failure or "bwrap is not installed"
    else:
        level = "bwrap"
        compiled, why_not = _probe_seccomp(bwrap)
        if compiled is not None:
            level = "seccomp"
        else:
            problems["seccomp"] = why_not or "unknown"
    features = {
        **_namespaces(),
        "seccomp": f"{len(DENIED)} syscalls refused" if compiled is not None else "not applied",
        "landlock_abi": _landlock_abi(),
        "cgroup_v2": "yes" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "no",
        "process_limit": _process_limit(),
        "network": "off (always, for now)" if bwrap_works else "not isolated",
    }
    return Attestation(level, bwrap if bwrap_works else None, features, problems, compiled)


__all__ = ["LEVELS", "Attestation", "attest", "missing_for", "pids_cgroup_usable"]
