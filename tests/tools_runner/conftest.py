"""Runner fixtures: a temporary workspace, the host's sandbox attestation (probed once),
and an `Executor` over the built-in tools, driven directly without NATS."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.fetch import Fetcher
from tether_tools_runner.sandbox import (
    Attestation,
    attest,
    hand_over,
    release_cgroups,
    sandbox_user,
)
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools import Builtins

MakeExecutor = Callable[..., Executor]


@pytest.fixture(scope="session")
def attestation() -> Iterator[Attestation]:
    try:
        yield attest()
    finally:
        release_cgroups()  # this test process's parent pids cgroup, as the app does on stop


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    hand_over(root, sandbox_user())  # as the runner does at start: the sandbox user's
    return root


@pytest.fixture
def make_executor(workspace: Path, attestation: Attestation) -> Iterator[MakeExecutor]:
    made: list[Builtins] = []

    def make(
        *, fetcher: Fetcher | None = None, attest_as: Attestation | None = None, **settings: Any
    ) -> Executor:
        config = RunnerSettings(workspace=workspace, **settings)
        used = attest_as or attestation
        builtins = Builtins(config, used, fetcher=fetcher)
        made.append(builtins)  # its file workers are stopped after the test
        return Executor(
            Registry(builtins.tools()),
            default_timeout_s=config.default_timeout_s,
            attestation=used,
            min_sandbox=config.min_sandbox,
        )

    try:
        yield make
    finally:
        for builtins in made:
            builtins.close()


@pytest.fixture
def executor(make_executor: MakeExecutor) -> Executor:
    return make_executor()


async def _call(
    executor: Executor, name: str, args: dict[str, Any], *, run_id: str = "run-1"
) -> ToolResult:
    return await executor.execute(
        ExecuteTool(run_id=run_id, call_id=uuid.uuid4().hex[:8], name=name, args=args)
    )


@pytest.fixture
def call() -> Callable[..., Awaitable[ToolResult]]:
    """`await call(executor, name, args, run_id=...)`: one call straight to the executor."""
    return _call
