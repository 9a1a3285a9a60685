"""Sandbox attestation: the level is what this host really gives, a tool whose minimum
is not met is refused naming what is missing, and nothing falls back to running
unsandboxed."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import LEVELS, Attestation, missing_for
from tether_tools_runner.sandbox.cgroups import hierarchy

Call = Callable[..., Awaitable[ToolResult]]
RLIMITS_ONLY = Attestation("rlimits", None, {}, {"bwrap": "bwrap is not installed"})


def test_the_host_is_attested(attestation: Attestation) -> None:
    assert attestation.level in LEVELS
    assert set(attestation.features) >= {"user_ns", "seccomp", "landlock_abi", "process_limit"}
    assert (attestation.bwrap is not None) == attestation.at_least("bwrap")
    assert (attestation.seccomp is not None) == attestation.at_least("seccomp")
    network = attestation.features["network"]
    assert (network == "off (always, for now)") == attestation.at_least("bwrap")
    assert missing_for(attestation, attestation.level) is None


def test_missing_names_what_is_missing() -> None:
    reason = missing_for(RLIMITS_ONLY, "bwrap")
    assert reason is not None
    assert "bwrap is not installed" in reason
    assert missing_for(RLIMITS_ONLY, "rlimits") is None
    assert "unknown sandbox level" in (missing_for(RLIMITS_ONLY, "gvisor") or "")


async def test_a_tool_below_its_minimum_is_refused_not_downgraded(
    make_executor: Callable[..., Executor], call: Call, workspace: Path
) -> None:
    executor = make_executor(attest_as=RLIMITS_ONLY, min_sandbox={"shell": "bwrap"})
    result = await call(executor, "shell", {"command": "touch ran.txt"})
    assert result.error_code == "sandbox_insufficient"
    assert "bwrap is not installed" in result.content
    assert not (workspace / "ran.txt").exists()
    other = await call(executor, "calculate", {"expression": "1+1"})
    assert other.ok


async def test_rlimits_level_still_kills_the_tree_on_timeout(
    make_executor: Callable[..., Executor], call: Call
) -> None:
    executor = make_executor(attest_as=RLIMITS_ONLY, min_sandbox={})
    started = time.perf_counter()
    result = await call(
        executor, "shell", {"command": "sleep 104.25 & sleep 105.25", "timeout_s": 1}
    )
    assert result.error_code == "timeout"
    assert time.perf_counter() - started < 10
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            assert b"104.25" not in cmdline
            assert b"105.25" not in cmdline


async def test_call_cgroups_are_removed_after_each_call(
    attestation: Attestation, executor: Executor, call: Call
) -> None:
    found = hierarchy()
    if found is None:
        pytest.fail("the runner (root in the tests) could not make cgroups here")
    assert attestation.features["process_limit"] == "per call (cgroup)"
    for command in ("true", "sleep 100.5 & exit 0", "(: &) ; exit 3"):
        await call(executor, "shell", {"command": command})
    for base in found.bases.values():
        assert [p for p in base.iterdir() if p.is_dir()] == []
