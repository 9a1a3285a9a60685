"""A runner whose staging folder cannot be used (not creatable by its user, a file, a
link, someone else's) answers a stage request with the structured error
`staging_unavailable` naming the folder, logs it, and stages nothing; the brain's
staging client turns that into an effect without a change set that says why, so the
call is asked for the old way and its card claims no diff."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.clients.runner import BusRunner
from tether_brain.clients.staging import stage
from tether_common.bus import Bus
from tether_common.errors import ErrorCode, TetherError
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ExecuteTool, effect_key
from tether_tools_runner.app import make_stager
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import Attestation, sandbox_user
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.staging.stager import Stager
from tether_tools_runner.staging.store import StagedStore
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools import Builtins

COMMAND = "echo staged > made.txt"  # stageable: it stays in the workspace


def under_sysfs(tmp_path: Path) -> Path:
    # sysfs refuses mkdir even to root (EPERM): the PermissionError a non-root runner
    # gets for `/tether-staging`, reproduced for a suite that runs as root.
    return Path("/sys/tether-staging-test")


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text("x")
    return tmp_path / "plain" / "staging"


def is_a_file(tmp_path: Path) -> Path:
    (tmp_path / "staging").write_text("x")
    return tmp_path / "staging"


def is_a_link(tmp_path: Path) -> Path:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "staging").symlink_to(tmp_path / "elsewhere")
    return tmp_path / "staging"


def someone_elses(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("giving a folder away needs root")
    (tmp_path / "staging").mkdir()
    os.chown(tmp_path / "staging", sandbox_user().uid, sandbox_user().gid)
    return tmp_path / "staging"


def in_procfs(tmp_path: Path) -> Path:
    return Path("/proc/tether-staging-test")


UNUSABLE: list[Callable[[Path], Path]] = [
    under_sysfs,
    under_a_file,
    is_a_file,
    is_a_link,
    someone_elses,
    in_procfs,
]


@pytest.fixture(params=UNUSABLE, ids=[f.__name__ for f in UNUSABLE])
async def stager(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    workspace: Path,
    attestation: Attestation,
    migrated: AsyncEngine,
) -> AsyncIterator[Stager]:
    folder = request.param(tmp_path)
    settings = RunnerSettings(workspace=workspace, staging_dir=folder)
    builtins = Builtins(settings, attestation)
    executor = Executor(
        Registry(builtins.tools()),
        default_timeout_s=settings.default_timeout_s,
        attestation=attestation,
        min_sandbox=settings.min_sandbox,
    )
    try:
        yield make_stager(settings, builtins, executor, StagedStore(migrated), home=tmp_path)
    finally:
        builtins.close()


def shell_call(call_id: str = "c1") -> ExecuteTool:
    return ExecuteTool(
        run_id="run-staging-unavailable",
        call_id=call_id,
        name="shell",
        args={"command": COMMAND},
        idempotency_key=effect_key("run-staging-unavailable", call_id),
    )


async def test_the_stage_request_answers_staging_unavailable(
    stager: Stager, bus: Bus, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await bus.serve(bus.subjects.tool_stage, stager.stage)
    with caplog.at_level(logging.WARNING), pytest.raises(TetherError) as refused:
        await bus.request(bus.subjects.tool_stage, shell_call(), timeout=30.0)
    assert refused.value.code == ErrorCode.STAGING_UNAVAILABLE
    assert stager.shell is not None
    assert str(stager.shell.root) in refused.value.message
    assert not (workspace / "made.txt").exists()
    [logged] = [r.getMessage() for r in caplog.records if "could not be staged" in r.getMessage()]
    assert "run-staging-unavailable" in logged


async def test_the_brain_asks_without_a_diff_and_says_why(stager: Stager, bus: Bus) -> None:
    await bus.serve(bus.subjects.tool_stage, stager.stage)
    tool = stager.executor.registry.get("shell")
    assert tool is not None
    assert tool.descriptor.stageable
    call = CallRecord(id="c2", name="shell", arguments={"command": COMMAND})
    effect = await stage(BusRunner(bus), "run-staging-unavailable", call, tool.descriptor, None)
    assert effect is not None  # the card is told why it has no diff
    assert not effect.stageable
    assert effect.changes is None
    assert effect.error_code is None  # asked for, not refused: the call itself can run
    assert "staging_unavailable" in effect.reason
