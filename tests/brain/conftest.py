"""The `run_script` fixture: run a scripted model to the end through the real services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether_client import TetherClient
from tether_common.messages.runs import RunEvent, RunView
from tether_common.supervisor import Supervisor
from tether_common.testing import RunScript, Turn, write_script


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
