"""A parked run survives a restart of every service, and a long history is fitted to a
small context window with a `compaction` event."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tether_client import TetherClient
from tether_common.supervisor import Supervisor
from tether_common.testing import RunScript, call, event_data, say, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({"convert_time": "confirm"}),
        "TETHER_BRAIN_CONTEXT_WINDOWS": json.dumps({"tiny": 2600}),
    }


async def test_a_long_history_is_fitted_to_a_small_window(
    run_script: RunScript, stack: Supervisor, scripts_dir: Path
) -> None:
    zones = ["UTC", "Asia/Tokyo", "Europe/Paris", "America/Lima", "Africa/Cairo"]
    turns = [[call("current_time", timezone=z)] for z in zones] + [say("done")]
    model = write_script(scripts_dir, turns)
    (scripts_dir / "tiny.json").write_text((scripts_dir / f"{model}.json").read_text())
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "what time is it everywhere? " * 20, provider="scripted", model="tiny", max_steps=8
        )
        events = [e async for e in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    assert run.status == "completed"
    compactions = event_data(events, "compaction")
    assert compactions
    assert "old tool results cut" in compactions[0]["actions"]
    assert len([m for m in run.steps if m.kind == "tool"]) == len(zones), "stored history changed"


async def test_a_parked_run_survives_a_restart_of_every_service(
    stack: Supervisor, scripts_dir: Path
) -> None:
    convert = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
    model = write_script(scripts_dir, [[call("convert_time", **convert)], say("after the restart")])
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("convert", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.approval_needed":
                approval_id = event.data["approval_id"]
                break
    await stack.stop()
    await stack.start()
    await stack.wait_ready(timeout=90)
    async with httpx.AsyncClient(timeout=10) as http:
        decided = await http.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json={"decision": "allow_once"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert decided.status_code == 200
    async with TetherClient(stack.child("brain").url) as client:
        _ = [e async for e in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    assert run.status == "completed"
    assert run.answer == "after the restart"
