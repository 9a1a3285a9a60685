"""One shell call's cgroups: a memory and a pids limit over the call's whole process
tree (not per process), the counters that say which limit the call hit, and the way
every member is found and killed afterwards.

cgroup v1 (one hierarchy per controller, as on this project's hosts) and v2 (one unified
hierarchy, as in most containers) are both handled. A call's groups are made inside the
runner's own groups (`<own>/tether-runner-<pid>/<call>`), so they stay under whatever
limits the runner itself is given. Only root can make them; otherwise `hierarchy()` is
None and the attestation says the limits are per process only."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where this runner's call groups go: one folder per controller (v1) or one (v2)."""

    version: int
    bases: dict[str, Path]  # controller -> this runner's parent group


def _own_paths() -> dict[str, str]:
    """The runner's own group per controller ("" for the v2 unified one)."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            found[name] = path
    return found


def _enable_v2(group: Path) -> bool:
    """Whether memory and pids are delegated to `group`'s children (enabling them)."""
    # EBUSY when the group holds processes itself; they may be enabled already.
    with contextlib.suppress(OSError):
        (group / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
    enabled = (group / "cgroup.subtree_control").read_text().split()
    return all(c in enabled for c in _CONTROLLERS)


def _sweep(parent: Path) -> None:
    """Remove the empty groups of runners that died without their shutdown (SIGKILL),
    so they do not pile up; a group still holding a process stays."""
    with contextlib.suppress(OSError):
        for stale in parent.glob("tether-runner-*"):
            pid = stale.name.removeprefix("tether-runner-")
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            with contextlib.suppress(OSError):
                for leaf in stale.iterdir():
                    if leaf.is_dir():
                        leaf.rmdir()
                stale.rmdir()


@functools.cache
def hierarchy() -> Hierarchy | None:
    """This runner's place for call groups, made on first use; None when there is none
    (not root, no such controllers, or v2 without delegation)."""
    if os.geteuid() != 0:
        return None
    try:
        own = _own_paths()
        name = f"tether-runner-{os.getpid()}"
        if all((ROOT / c).is_dir() and c in own for c in _CONTROLLERS):
            bases = {c: ROOT / c / own[c].lstrip("/") / name for c in _CONTROLLERS}
            for base in bases.values():
                _sweep(base.parent)
                base.mkdir(exist_ok=True)
            return Hierarchy(1, bases)
        if (ROOT / "cgroup.controllers").exists() and "" in own:
            mine = ROOT / own[""].lstrip("/")
            base = mine / name
            if not _enable_v2(mine):
                return None
            _sweep(mine)
            base.mkdir(exist_ok=True)
            return Hierarchy(2, dict.fromkeys(_CONTROLLERS, base)) if _enable_v2(base) else None
    except OSError:
        return None
    return None


def release() -> None:
    """Remove this runner's (empty) parent groups at shutdown."""
    found = hierarchy()
    hierarchy.cache_clear()
    if found is None:
        return
    for base in set(found.bases.values()):
        with contextlib.suppress(OSError):
            base.rmdir()


def _counter(path: Path, key: str) -> int:
    """`key`'s value in a flat "key value" file (memory.events, pids.events, ...)."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class CallGroup:
    """The groups of one call: made with their limits, joined by the child before exec,
    read for what was exceeded, emptied and removed at the end."""

    def __init__(self, found: Hierarchy, memory_mb: int, max_pids: int) -> None:
        self.version = found.version
        leaf = uuid.uuid4().hex[:12]
        self.paths = {c: base / leaf for c, base in found.bases.items()}
        for path in set(self.paths.values()):
            path.mkdir()
        limit = str(memory_mb * 1024 * 1024)
        memory, pids = self.paths["memory"], self.paths["pids"]
        if self.version == 1:
            (memory / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # only with swap accounting: no swap either
                (memory / "memory.memsw.limit_in_bytes").write_text(limit)
        else:
            (memory / "memory.max").write_text(limit)
            with contextlib.suppress(OSError):
                (memory / "memory.swap.max").write_text("0")
        (pids / "pids.max").write_text(str(max_pids))

    def procs_files(self) -> list[str]:
        """What the child writes its pid into, before exec (once per distinct group)."""
        return [str(path / "cgroup.procs") for path in sorted(set(self.paths.values()))]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.paths["pids"] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        memory = self.paths["memory"]
        if self.version == 1:
            return _counter(memory / "memory.oom_control", "oom_kill")
        return _counter(memory / "memory.events", "oom_kill")

    def fork_refusals(self) -> int:
        return _counter(self.paths["pids"] / "pids.events", "max")

    def kill_all(self) -> None:
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.paths["pids"] / "cgroup.kill").write_text("1")
        # pids.max stops new forks, so a few sweeps always empty the group.
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Remove the groups; False while a member is still exiting."""
        for path in set(self.paths.values()):
            with contextlib.suppress(FileNotFoundError):
                try:
                    path.rmdir()
                except OSError:
                    return False
        return True


__all__ = ["CallGroup", "Hierarchy", "hierarchy", "release"]
