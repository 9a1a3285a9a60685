"""`bench scaling`'s CPU quota groups: on this host (cpu on cgroup v1) a real group holds
a process to its share and is removed afterwards; the v2 file protocol is checked on a
folder laid out like a v2 group; a host without what the quota needs is refused with
what is missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench.cpuquota import PERIOD_US, CpuHierarchy, QuotaGroup, cpu_hierarchy, quotas

from tether_common.errors import ConfigError


def _cpu_group_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "cpu" in names.split(",") or names == "":
            return path
    return ""


def test_a_real_group_holds_a_process_to_its_share_and_is_removed() -> None:
    found = cpu_hierarchy()  # the suite runs as root; this host has a cpu controller
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        before = _cpu_group_of(sleeper.pid)
        with quotas(0.3, found) as held:
            group = held.hold("brain-0", sleeper.pid)
            assert group.cores == pytest.approx(0.3)
            assert group.members() == [sleeper.pid]
            assert _cpu_group_of(sleeper.pid).endswith(f"{held.base.name}/brain-0")
            assert group.throttling().throttled >= 0
        assert not group.path.exists()
        assert not held.base.exists()
        if found.version == 1:  # put back where it was (v2 members exit first)
            assert _cpu_group_of(sleeper.pid) == before
    finally:
        sleeper.kill()
        sleeper.wait()


def test_v2_file_protocol(tmp_path: Path) -> None:
    with quotas(0.3, CpuHierarchy(2, tmp_path)) as held:
        assert (held.base / "cgroup.subtree_control").read_text() == "+cpu"
        group = held.hold("brain-1", 4242)
        assert (group.path / "cpu.max").read_text() == f"30000 {PERIOD_US}"
        assert group.cores == pytest.approx(0.3)
        assert group.members() == [4242]
        stat = "usage_usec 9000\nnr_periods 50\nnr_throttled 7\nthrottled_usec 12500\n"
        (group.path / "cpu.stat").write_text(stat)
        found = group.throttling()
        assert (found.periods, found.throttled, found.throttled_ms) == (50, 7, 12.5)


def test_v1_throttling_is_read_in_nanoseconds(tmp_path: Path) -> None:
    group = QuotaGroup(CpuHierarchy(1, tmp_path), tmp_path / "g", 0.5)
    assert (group.path / "cpu.cfs_quota_us").read_text() == str(PERIOD_US // 2)
    (group.path / "cpu.stat").write_text("nr_periods 9\nnr_throttled 3\nthrottled_time 4000000\n")
    found = group.throttling()
    assert (found.periods, found.throttled, found.throttled_ms) == (9, 3, 4.0)


def test_the_least_quota_is_the_kernels_millisecond(tmp_path: Path) -> None:
    group = QuotaGroup(CpuHierarchy(2, tmp_path), tmp_path / "g", 0.001)
    assert (group.path / "cpu.max").read_text() == f"1000 {PERIOD_US}"
    with pytest.raises(ValueError, match="quota"):
        QuotaGroup(CpuHierarchy(2, tmp_path), tmp_path / "h", 0)


def test_v1_groups_go_under_the_process_own_cpu_group(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    found = cpu_hierarchy(tmp_path, {"cpu": "/docker/abc", "memory": "/x"}, euid=0)
    assert found == CpuHierarchy(1, tmp_path / "cpu" / "docker" / "abc")


def _v2_root(tmp: Path, controllers: str) -> Path:
    (tmp / "cgroup.controllers").write_text(controllers)
    (tmp / "cgroup.subtree_control").write_text("")
    return tmp


@pytest.mark.parametrize(
    ("layout", "own", "euid", "missing"),
    [
        ("v1", {"cpu": "/"}, 1000, "needs root"),
        ("empty", {"": "/"}, 0, "neither .*cpu \\(cgroup v1\\) nor .*cgroup.controllers"),
        ("v1 without cpu in /proc/self/cgroup", {"memory": "/"}, 0, "neither"),
        ("v2 without cpu", {"": "/"}, 0, "lists only \\['memory', 'pids'\\]"),
        ("v2 not delegated", {"": "/"}, 0, "cpu delegated to the children of"),
    ],
)
def test_a_host_without_the_quota_is_refused_naming_what_is_missing(
    tmp_path: Path, layout: str, own: dict[str, str], euid: int, missing: str
) -> None:
    if layout.startswith("v1"):
        (tmp_path / ("cpu" if layout == "v1" else "memory")).mkdir()
    elif layout == "v2 without cpu":
        _v2_root(tmp_path, "memory pids\n")
    elif layout == "v2 not delegated":
        # A plain file, not the kernel's: `+cpu` written to it never reads back as `cpu`.
        _v2_root(tmp_path, "cpu memory pids\n")
    with pytest.raises(ConfigError, match=missing):
        cpu_hierarchy(tmp_path, own, euid=euid)
