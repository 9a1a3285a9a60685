"""The `run_script` fixture: run a scripted model to the end through the real services;
the `store` fixture: the brain's run store on the test database; the `harness` fixture:
the loop in process, for its rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from builtin_tools import RUNNER_TOOLS
from runstore import migrated_store
from tether_brain.persistence.store import RunStore
from tether_brain.testing import Harness, LocalRunner
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import RunScript, Turn, write_script
from tether_tools_runner.executor import Executor
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools.calculate import calculate_tools
from tether_tools_runner.tools.clock import clock_tools


@pytest.fixture
def run_script(stack: Supervisor, scripts_dir: Path) -> RunScript:
    async def run(
        turns: list[Turn],
        prompt: str = "do the task",
        helpers: dict[str, list[Turn]] | None = None,
        **options: Any,
    ) -> tuple[RunView, list[RunEvent]]:
        model = write_script(scripts_dir, turns, helpers)
        async with TetherClient(stack.child("brain").url) as client:
            accepted = await client.start_run(prompt, provider="scripted", model=model, **options)
            events = [e async for e in client.events(accepted.run_id)]
            return await client.get_run(accepted.run_id), events

    return run


@pytest.fixture
async def store(engine: AsyncEngine) -> RunStore:
    return await migrated_store(engine)


@pytest.fixture
def harness() -> Harness:
    """The loop in process (`tether_brain.testing`): a scripted model, the tools-runner's
    own executor over its clock and calculator tools (every built-in tool is in the
    catalogue; the others are refused before they would run), memory for the rest."""
    executor = Executor(Registry([*clock_tools(), *calculate_tools()]), default_timeout_s=30.0)
    return Harness(LocalRunner(RUNNER_TOOLS, executor.execute))
