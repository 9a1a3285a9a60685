"""A parked run survives a restart of every service, and a long history is fitted to a
small context window with a `compaction` event."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import RunScript, call, event_data, say, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({"convert_time": "confirm"}),
        "TETHER_BRAIN_CONTEXT_WINDOWS": json.dumps({"tiny": 2600}),
        "TETHER_BRAIN_AGENTS": json.dumps(
            {"strict": {"done": {"pattern": "SOURCES:", "message": "List your SOURCES: too."}}}
        ),
        "TETHER_BRAIN_PRICES": json.dumps({"pricey": {"input": 1_000_000.0, "output": 0.0}}),
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


async def test_a_done_criterion_sends_an_answer_back_once(run_script: RunScript) -> None:
    turns = [say("Paris."), say("Paris. SOURCES: atlas")]
    run, events = await run_script(turns, agent="strict")
    assert run.answer == "Paris. SOURCES: atlas"
    assert {"kind": "not_done", "step": 1} in event_data(events, "guard")


async def test_max_tokens_is_refused_where_usage_is_not_reported(stack: Supervisor) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(
            f"{stack.child('brain').url}/v1/runs",
            json={"prompt": "hi", "provider": "rules", "max_tokens": 100},
            headers={"Authorization": "Bearer test-operator-token"},
        )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "limit_unenforceable"


async def test_a_call_that_could_overspend_is_not_made(
    stack: Supervisor, scripts_dir: Path
) -> None:
    model = write_script(scripts_dir, [say("expensive")])
    (scripts_dir / "pricey.json").write_text((scripts_dir / f"{model}.json").read_text())
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "hello", provider="scripted", model="pricey", max_cost=0.5
        )
        events = [e async for e in client.events(accepted.run_id)]
    assert events[-1].data["status"] == "stopped"
    assert events[-1].data["stop_reason"] == "budget_exhausted"
    assert events[-1].data["usage"]["cost"] == 0


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
