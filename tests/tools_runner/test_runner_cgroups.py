"""A call's cgroups: on this host (cgroup v1) the real groups get the limits and are
removed; the v2 file protocol (one group, memory.max, memory.events, cgroup.kill) is
checked on a folder laid out like a v2 group, since this host has no v2 controllers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether_tools_runner.sandbox.cgroups import CallGroup, Hierarchy, _sweep, hierarchy


def test_v1_groups_carry_the_limits_and_are_removed() -> None:
    found = hierarchy()
    if found is None:
        pytest.fail("the tests run as root and should be able to make cgroups here")
    group = CallGroup(found, memory_mb=300, max_pids=40)
    try:
        if found.version == 1:
            limit = (group.paths["memory"] / "memory.limit_in_bytes").read_text().strip()
            assert int(limit) == 300 * 1024 * 1024
        assert (group.paths["pids"] / "pids.max").read_text().strip() == "40"
        assert len(group.procs_files()) == len(set(group.paths.values()))
        assert (group.oom_kills(), group.fork_refusals(), group.pids()) == (0, 0, [])
    finally:
        assert group.remove()
    assert not any(path.exists() for path in group.paths.values())


def test_v2_file_protocol(tmp_path: Path) -> None:
    base = tmp_path / "tether-runner-1"
    base.mkdir()
    group = CallGroup(Hierarchy(2, {"memory": base, "pids": base}), memory_mb=64, max_pids=8)
    leaf = group.paths["memory"]
    assert group.paths["pids"] == leaf
    assert (leaf / "memory.max").read_text() == str(64 * 1024 * 1024)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (leaf / "pids.max").read_text() == "8"
    assert group.procs_files() == [str(leaf / "cgroup.procs")]
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    (leaf / "pids.events").write_text("max 3\n")
    assert (group.oom_kills(), group.fork_refusals()) == (2, 3)
    group.kill_all()
    assert (leaf / "cgroup.kill").read_text() == "1"


def test_groups_of_dead_runners_are_swept(tmp_path: Path) -> None:
    dead = tmp_path / "tether-runner-999999999"  # no such pid
    (dead / "leftover-call").mkdir(parents=True)
    alive = tmp_path / f"tether-runner-{os.getpid()}"
    alive.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    _sweep(tmp_path)
    assert not dead.exists()
    assert alive.exists()
    assert other.exists()
