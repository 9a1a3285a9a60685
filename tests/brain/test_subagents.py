"""Sub-agents through the real services: a child run per run_agent call, its summary back
to the parent, depth limits, tool intersection, stop propagation, and a child that needs
an approval while its parent waits parked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import RunScript, call, event_data, say, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {"TETHER_BRAIN_GUARDRAILS": json.dumps({"convert_time": "confirm"})}


async def test_the_child_summary_returns_to_the_parent(
    run_script: RunScript, stack: Supervisor
) -> None:
    turns = [[call("run_agent", task="T1", tools=["current_time"])], say("parent done")]
    helpers = {"T1": [[call("current_time", timezone="UTC")], say("child found the time")]}
    run, events = await run_script(turns, helpers=helpers)
    assert run.status == "completed"
    result = event_data(events, "tool.result")[0]
    assert (result["name"], result["ok"], result["content"]) == (
        "run_agent",
        True,
        "child found the time",
    )
    start, end = event_data(events, "agent.start")[0], event_data(events, "agent.end")[0]
    assert start["child_run_id"] == end["child_run_id"]
    async with TetherClient(stack.child("brain").url) as client:
        child = await client.get_run(start["child_run_id"])
        child_events = [e async for e in client.events(child.run_id)]
    assert (child.parent_id, child.depth, child.status) == (run.run_id, 1, "completed")
    assert all(e.data.get("depth") == 1 for e in child_events)
    assert run.usage.input_tokens >= child.usage.input_tokens


async def test_children_of_one_step_run_in_parallel(run_script: RunScript) -> None:
    turns = [[call("run_agent", task="A"), call("run_agent", task="B")], say("both back")]
    helpers = {
        "A": [[{"pause_s": 1.0}, {"kind": "chunk", "text": "from A"}]],
        "B": [[{"pause_s": 1.0}, {"kind": "chunk", "text": "from B"}]],
    }
    started = asyncio.get_running_loop().time()
    run, events = await run_script(turns, helpers=helpers)
    assert run.status == "completed"
    assert [r["content"] for r in event_data(events, "tool.result")] == ["from A", "from B"]
    assert asyncio.get_running_loop().time() - started < 10


async def test_grandchildren_get_no_run_agent(run_script: RunScript) -> None:
    turns = [[call("run_agent", task="child")], say("top done")]
    helpers = {
        "child": [[call("run_agent", task="grandchild")], say("child done")],
        "grandchild": [[call("run_agent", task="too deep")], say("grandchild done")],
    }
    run, events = await run_script(turns, helpers=helpers)
    assert run.status == "completed"
    assert event_data(events, "tool.result")[0]["content"] == "child done"


async def test_a_child_gets_only_the_tools_it_asked_for(
    run_script: RunScript, stack: Supervisor
) -> None:
    turns = [[call("run_agent", task="clock only", tools=["current_time"])], say("ok")]
    helpers = {"clock only": [[call("calculate", expression="1+1")], say("could not calculate")]}
    _, events = await run_script(turns, helpers=helpers)
    child_id = event_data(events, "agent.start")[0]["child_run_id"]
    async with TetherClient(stack.child("brain").url) as client:
        child_events = [e async for e in client.events(child_id)]
    refused = event_data(child_events, "tool.result")[0]
    assert refused["error_code"] == "switched_off"


async def test_stopping_a_parent_stops_its_children(stack: Supervisor, scripts_dir: Path) -> None:
    model = write_script(
        scripts_dir,
        [[call("run_agent", task="slow")], say("never")],
        {"slow": [[{"pause_s": 30}, {"kind": "chunk", "text": "late"}]]},
    )
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("go", provider="scripted", model=model)
        child_id = ""
        async for event in client.events(accepted.run_id):
            if event.kind == "agent.start":
                child_id = event.data["child_run_id"]
                break
        await asyncio.sleep(0.3)
        await client.stop_run(accepted.run_id)
        _ = [e async for e in client.events(accepted.run_id)]
        parent, child = await client.get_run(accepted.run_id), await client.get_run(child_id)
    assert (parent.status, parent.stop_reason) == ("stopped", "stop_requested")
    assert child.status == "stopped"


async def test_a_child_waiting_for_approval_parks_its_parent(
    stack: Supervisor, scripts_dir: Path, database_url: str
) -> None:
    convert = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
    model = write_script(
        scripts_dir,
        [[call("run_agent", task="needs ok")], say("parent resumed")],
        {"needs ok": [[call("convert_time", **convert)], say("converted")]},
    )
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("go", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "agent.start":
                child_id = event.data["child_run_id"]
                break
        async for event in client.events(child_id):
            if event.kind == "tool.approval_needed":
                approval_id = event.data["approval_id"]
                break
        conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            rows = await conn.fetch(
                "SELECT run_id, status, lease_owner FROM runs WHERE run_id = ANY($1)",
                [accepted.run_id, child_id],
            )
        finally:
            await conn.close()
        assert {r["status"] for r in rows} == {"awaiting_agents", "awaiting_approval"}
        assert all(r["lease_owner"] is None for r in rows)
        async with httpx.AsyncClient(timeout=10) as http:
            decided = await http.post(
                f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
                json={"decision": "allow_once"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
        assert decided.status_code == 200
        _ = [e async for e in client.events(accepted.run_id)]
        parent = await client.get_run(accepted.run_id)
    assert parent.status == "completed"
    assert parent.answer == "parent resumed"
