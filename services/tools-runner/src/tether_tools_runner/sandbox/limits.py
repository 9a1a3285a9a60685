"""Limits applied to the sandboxed process tree: rlimits set in the child before exec,
and a per-call pids cgroup (v1) when the runner is root, because RLIMIT_NPROC never
binds root. The cgroup is also how the whole tree is found and killed afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .attest import PIDS_CGROUP_V1


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    cpu_s: int = 60
    memory_mb: int = 1024
    file_size_mb: int = 100
    processes: int = 256
    open_files: int = 256


def rlimits_setter(limits: SandboxLimits, cgroup: PidsCgroup | None) -> Callable[[], None]:
    """The `preexec_fn` of the child: join the cgroup, then lower every limit.

    Everything is computed here, in the parent: the child runs between fork and exec,
    where importing or taking a lock another thread held at fork time could deadlock."""
    import resource

    mb = 1024 * 1024
    table = [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_mb * mb),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    procs = str(cgroup.path / "cgroup.procs") if cgroup is not None else None
    setrlimit, getpid = resource.setrlimit, os.getpid

    def apply() -> None:
        if procs is not None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(getpid()).encode())
            finally:
                os.close(fd)
        for kind, value in table:
            setrlimit(kind, (value, value))

    return apply


class PidsCgroup:
    """One call's pids cgroup: caps the number of tasks and kills them all at the end."""

    def __init__(self, max_pids: int, base: Path = PIDS_CGROUP_V1) -> None:
        self.path = base / f"tether-runner-{os.getpid()}" / uuid.uuid4().hex[:12]
        self.path.mkdir(parents=True)
        (self.path / "pids.max").write_text(str(max_pids))

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        # pids.max stops new forks, so a few sweeps always empty the group.
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def release_cgroups(base: Path = PIDS_CGROUP_V1) -> None:
    """Remove this runner's (empty) parent pids cgroup at shutdown."""
    with contextlib.suppress(OSError):
        (base / f"tether-runner-{os.getpid()}").rmdir()


__all__ = ["PidsCgroup", "SandboxLimits", "release_cgroups", "rlimits_setter"]
