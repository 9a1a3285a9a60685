"""Limits applied to the sandboxed process tree, and the child's setup before exec.

Per call, when the runner is root: the call's memory and pids cgroups (`cgroups.py`),
a private mount namespace holding a size-capped tmpfs for the sandbox's /tmp beside a
bind of the workspace (so the sandbox user, who may not traverse the path to the
workspace, can still be given it), and the drop to the sandbox user. Per process, always:
rlimits for CPU, file size, open files and core dumps; the per-process memory and process
count rlimits only when no cgroup gives the per-call ones (RLIMIT_NPROC counts every
process of the uid, so it would make concurrent calls share one budget)."""

from __future__ import annotations

import ctypes
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cgroups import CallGroup
from .identity import SandboxUser

# Mount point of each call's staging tmpfs, inside the call's own mount namespace only;
# on the host it stays an empty root-owned folder.
STAGE = Path("/run/tether-sandbox")
STAGED_TMP = STAGE / "tmp"
STAGED_SHM = STAGE / "shm"
STAGED_WORKSPACE = STAGE / "workspace"
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    cpu_s: int = 60
    memory_mb: int = 1024
    file_size_mb: int = 100
    processes: int = 256
    open_files: int = 256
    tmpfs_mb: int = 256


def _rlimits(limits: SandboxLimits, per_call: bool) -> list[tuple[int, int, int]]:
    """(kind, soft, hard). CPU's hard limit is a second above the soft one, so a process
    over it dies of SIGXCPU (which says why) rather than an anonymous SIGKILL."""
    mb = 1024 * 1024
    table = [
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb, limits.file_size_mb * mb),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if not per_call:
        table += [
            (resource.RLIMIT_AS, limits.memory_mb * mb, limits.memory_mb * mb),
            (resource.RLIMIT_NPROC, limits.processes, limits.processes),
        ]
    return table


def _stager(workspace: str, limits: SandboxLimits, user: SandboxUser) -> Callable[[], None]:
    """Makes the child's private mounts (runs in the child, as root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    unshare, mount = libc.unshare, libc.mount
    stage, work = bytes(STAGE), bytes(STAGED_WORKSPACE)
    private = (bytes(STAGED_TMP), bytes(STAGED_SHM))
    options = f"size={limits.tmpfs_mb * 1024 * 1024},mode=0755".encode()
    mkdir, chown, get_errno = os.mkdir, os.chown, ctypes.get_errno

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(get_errno(), f"sandbox staging: {what}")

    def stage_mounts() -> None:
        check(unshare(_CLONE_NEWNS), "unshare")
        check(mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "private /")
        check(mount(b"tmpfs", stage, b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "tmpfs")
        for path in private:
            mkdir(path, 0o700)
            chown(path, user.uid, user.gid)
        mkdir(work, 0o755)
        check(mount(workspace.encode(), work, None, _MS_BIND | _MS_REC, None), "workspace")

    return stage_mounts


def child_setup(
    limits: SandboxLimits,
    group: CallGroup | None,
    user: SandboxUser,
    staged_workspace: str | None,
) -> Callable[[], None]:
    """The `preexec_fn` of the child: join the call's cgroups, make the staging mounts,
    lower the limits, then become the sandbox user for good.

    Everything is computed here, in the parent: the child runs between fork and exec,
    where importing or taking a lock another thread held at fork time could deadlock."""
    procs = group.procs_files() if group is not None else []
    table = _rlimits(limits, per_call=group is not None)
    stage = _stager(staged_workspace, limits, user) if staged_workspace is not None else None
    setrlimit, getpid = resource.setrlimit, os.getpid
    drop = user.drops
    setgroups, setresgid, setresuid = os.setgroups, os.setresgid, os.setresuid

    def apply() -> None:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, str(getpid()).encode())
            finally:
                os.close(fd)
        if stage is not None:
            stage()
        for kind, soft, hard in table:
            setrlimit(kind, (soft, hard))
        if drop:  # groups first: once the uid is gone, nothing else may be changed
            setgroups([])
            setresgid(user.gid, user.gid, user.gid)
            setresuid(user.uid, user.uid, user.uid)

    return apply


__all__ = ["STAGE", "STAGED_SHM", "STAGED_TMP", "STAGED_WORKSPACE", "SandboxLimits", "child_setup"]
