"""CPU quota groups for `bench scaling`: each brain replica in a cgroup of its own, held
to the same share of a core (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` where the cpu
controller is still mounted as v1, as on this project's hosts), with the rest of the
system left unconstrained.

Where this process sits in each hierarchy is read the way the tools-runner reads it for
its sandbox groups (`tether_tools_runner.sandbox.cgroups`). Only root can make groups; a
host where they cannot be made is refused with what is missing, never skipped: a
scaling figure without the quota would measure the machine's idle cores, not replicas.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether_common.errors import ConfigError
from tether_tools_runner.sandbox.cgroups import ROOT, _own_paths

__all__ = ["PERIOD_US", "CpuHierarchy", "QuotaGroup", "Throttling", "cpu_hierarchy", "quotas"]

PERIOD_US = 100_000  # the kernel's default period: a quota of 0.3 core is 30 ms of each 100


@dataclass(frozen=True, slots=True)
class CpuHierarchy:
    """Where the bench's CPU groups go: under its own group of the cpu controller."""

    version: int
    parent: Path


def cpu_hierarchy(
    root: Path = ROOT, own: Mapping[str, str] | None = None, euid: int | None = None
) -> CpuHierarchy:
    """The cpu controller this process may make groups under, or ConfigError naming
    what is missing (root, the controller, its delegation)."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise ConfigError(f"bench scaling needs root to make cgroups (running as uid {euid})")
    own = _own_paths() if own is None else own
    if (root / "cpu").is_dir() and "cpu" in own:
        return CpuHierarchy(1, root / "cpu" / own["cpu"].lstrip("/"))
    controllers = root / "cgroup.controllers"
    if not controllers.exists() or "" not in own:
        raise ConfigError(
            f"bench scaling needs the cpu controller: neither {root / 'cpu'} (cgroup v1) "
            f"nor {controllers} (cgroup v2) is there"
        )
    if "cpu" not in controllers.read_text().split():
        raise ConfigError(
            f"bench scaling needs the cpu controller: {controllers} lists only "
            f"{controllers.read_text().split() or 'nothing'}"
        )
    parent = root / own[""].lstrip("/")
    subtree = parent / "cgroup.subtree_control"
    # EBUSY when the group holds processes itself (v2's no-internal-process rule).
    with contextlib.suppress(OSError):
        subtree.write_text("+cpu")
    if "cpu" not in subtree.read_text().split():
        raise ConfigError(
            f"bench scaling needs cpu delegated to the children of {parent}: "
            f"{subtree} does not list it and it could not be enabled"
        )
    return CpuHierarchy(2, parent)


@dataclass(frozen=True, slots=True)
class Throttling:
    """A group's `cpu.stat`: the periods it ran in, in how many it hit its quota, and
    the time its tasks waited for the next period."""

    periods: int
    throttled: int
    throttled_ms: float


def _stat(path: Path) -> dict[str, int]:
    found = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            found[name] = int(value)
    return found


class QuotaGroup:
    """One group held to `cores` of a core; its members are the processes added."""

    def __init__(self, found: CpuHierarchy, path: Path, cores: float) -> None:
        if cores <= 0:
            raise ValueError(f"a CPU quota of {cores} cores")
        self.version = found.version
        self.path = path
        path.mkdir()
        quota = max(1000, round(cores * PERIOD_US))  # the kernel's least quota is 1 ms
        if found.version == 1:
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")

    @property
    def cores(self) -> float:
        """The quota as the kernel holds it, in cores."""
        if self.version == 1:
            quota = int((self.path / "cpu.cfs_quota_us").read_text())
            return quota / int((self.path / "cpu.cfs_period_us").read_text())
        quota_text, period = (self.path / "cpu.max").read_text().split()
        return int(quota_text) / int(period)

    def add(self, pid: int) -> None:
        """Move a process (all its threads; the threads it starts later follow) in."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def throttling(self) -> Throttling:
        stat = _stat(self.path / "cpu.stat")
        if self.version == 1:
            waited_ms = stat.get("throttled_time", 0) / 1e6
        else:
            waited_ms = stat.get("throttled_usec", 0) / 1e3
        return Throttling(stat.get("nr_periods", 0), stat.get("nr_throttled", 0), waited_ms)

    def remove(self, back_to: Path) -> None:
        """Remove the group, first moving a member still alive back to `back_to`'s group
        (v1; under v2 the members have exited by then: the stack stops first)."""
        for pid in self.members():
            with contextlib.suppress(OSError):
                (back_to / "cgroup.procs").write_text(str(pid))
        self.path.rmdir()


@dataclass
class Quotas:
    """The bench's groups, one per held process, under `tether-bench-<pid>`."""

    found: CpuHierarchy
    base: Path
    cores: float
    groups: dict[str, QuotaGroup] = field(default_factory=dict)

    def hold(self, name: str, pid: int) -> QuotaGroup:
        """Put process `pid` in a group of its own (named `name`) at the common quota."""
        group = self.groups[name] = QuotaGroup(self.found, self.base / name, self.cores)
        group.add(pid)
        return group


@contextlib.contextmanager
def quotas(cores: float, found: CpuHierarchy | None = None) -> Iterator[Quotas]:
    """Groups of `cores` each for the processes `hold` is given; removed on the way out
    (stop the held processes first: a v2 group with a member cannot be removed)."""
    found = cpu_hierarchy() if found is None else found
    base = found.parent / f"tether-bench-{os.getpid()}"
    try:
        base.mkdir()
    except OSError as exc:
        raise ConfigError(f"bench scaling cannot make the cgroup {base}: {exc}") from exc
    made = Quotas(found, base, cores)
    try:
        if found.version == 2:  # the groups under `base` get cpu.max only if it hands cpu down
            (base / "cgroup.subtree_control").write_text("+cpu")
        yield made
    finally:
        for group in made.groups.values():
            with contextlib.suppress(OSError):
                group.remove(found.parent)
        with contextlib.suppress(OSError):
            base.rmdir()
