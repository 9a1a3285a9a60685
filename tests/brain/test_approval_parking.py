"""A call the chain says to ask about parks its run (no task, no lease) until an operator
decides over the approvals API; the decision resumes the run on any brain replica.

The stack is `tether up`'s (tests/conftest.py: the default agent, its workspace, nothing
granted, no approvals rule) with two additions that touch no file tool: an organisation
`confirm` on `convert_time` (a read that asks), and a tool timeout of 8 s instead of 130 s
so that a runner which stops answering is found lost within a test."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.runs import RunEvent
from tether_common.testing import Turn, call, event_data, say, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: an admin token
CONFIRMED_TOOL = "convert_time"


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED_TOOL: "confirm"}),
        "TETHER_BRAIN_TOOL_TIMEOUT_S": str(TOOL_TIMEOUT_S),
    }


TOOL_TIMEOUT_S = 8


CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}


async def park(stack: Supervisor, scripts: Path, turns: list[Turn]) -> tuple[str, dict[str, Any]]:
    model = write_script(scripts, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("convert a time", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.approval_needed":
                return accepted.run_id, event.data
            assert event.kind != "run.end", event.data
    raise AssertionError("the run never asked")


async def decide(stack: Supervisor, approval_id: str, decision: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json={"decision": decision, "note": "checked by a test"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )


async def finish(stack: Supervisor, run_id: str) -> tuple[str, list[RunEvent]]:
    async with TetherClient(stack.child("brain").url) as client:
        events = [e async for e in client.events(run_id)]
        return (await client.get_run(run_id)).status, events


async def test_allow_once_resumes_and_runs_the_call(
    stack: Supervisor, scripts_dir: Path, database_url: str
) -> None:
    run_id, asked = await park(
        stack, scripts_dir, [[call(CONFIRMED_TOOL, **CONVERT)], say("converted")]
    )
    assert asked["code"] == "org_confirm"
    assert asked["arguments"] == CONVERT
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        row = await conn.fetchrow("SELECT status, lease_owner FROM runs WHERE run_id = $1", run_id)
    finally:
        await conn.close()
    assert row is not None
    assert (row["status"], row["lease_owner"]) == ("awaiting_approval", None)
    async with httpx.AsyncClient(timeout=10) as client:
        pending = await client.get(
            f"{stack.child('approvals').url}/v1/approvals?status=pending",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert asked["approval_id"] in {a["approval_id"] for a in pending.json()["approvals"]}

    assert (await decide(stack, asked["approval_id"], "allow_once")).status_code == 200
    status, events = await finish(stack, run_id)
    assert status == "completed"
    approved = event_data(events, "tool.approved")
    assert approved
    assert approved[0]["decision"] == "allow_once"
    result = [r for r in event_data(events, "tool.result") if r["name"] == CONFIRMED_TOOL][-1]
    assert result["ok"] is True
    assert "Asia/Tokyo" in result["content"]


async def test_deny_is_read_by_the_model(stack: Supervisor, scripts_dir: Path) -> None:
    run_id, asked = await park(
        stack, scripts_dir, [[call(CONFIRMED_TOOL, **CONVERT)], say("understood")]
    )
    assert (await decide(stack, asked["approval_id"], "deny")).status_code == 200
    status, events = await finish(stack, run_id)
    assert status == "completed"
    result = [r for r in event_data(events, "tool.result") if r["name"] == CONFIRMED_TOOL][-1]
    assert result["error_code"] == "approval_denied"
    assert "checked by a test" in result["content"]


async def test_a_decision_counts_once(stack: Supervisor, scripts_dir: Path) -> None:
    run_id, asked = await park(stack, scripts_dir, [[call(CONFIRMED_TOOL, **CONVERT)], say("done")])
    assert (await decide(stack, asked["approval_id"], "allow_once")).status_code == 200
    again = await decide(stack, asked["approval_id"], "allow_once")
    assert again.status_code == 409
    status, events = await finish(stack, run_id)
    assert status == "completed"
    runs_of_tool = [
        r for r in event_data(events, "tool.result") if r["name"] == CONFIRMED_TOOL and r["ok"]
    ]
    assert len(runs_of_tool) == 1


async def test_an_organisation_confirm_is_asked_each_time(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """`allow_run` remembers a call for the run, but never beats an organisation rule."""
    later = dict(CONVERT, time="10:00")
    turns = [[call(CONFIRMED_TOOL, **CONVERT)], [call(CONFIRMED_TOOL, **later)], say("both")]
    run_id, asked = await park(stack, scripts_dir, turns)
    assert (await decide(stack, asked["approval_id"], "allow_run")).status_code == 200
    async with TetherClient(stack.child("brain").url) as client:
        async for event in client.events(run_id, after=0):
            if (
                event.kind == "tool.approval_needed"
                and event.data["approval_id"] != asked["approval_id"]
            ):
                second = event.data
                break
    assert second["code"] == "org_confirm"
    assert (await decide(stack, second["approval_id"], "allow_once")).status_code == 200
    status, events = await finish(stack, run_id)
    assert status == "completed"
    assert [r["ok"] for r in event_data(events, "tool.result")] == [True, True]


async def test_a_grant_for_the_run_outlives_a_park_and_reload(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """`allow_run` on a write, then another call parks (the run is put away and loaded
    again when decided): the next write of the same tool is not asked again."""
    turns = [
        [call("file_write", path="granted-1.txt", content="one")],
        [call(CONFIRMED_TOOL, **CONVERT)],
        [call("file_write", path="granted-2.txt", content="two")],
        say("written"),
    ]
    run_id, asked = await park(stack, scripts_dir, turns)
    assert asked["name"] == "file_write"
    assert (await decide(stack, asked["approval_id"], "allow_run")).status_code == 200
    seen = {asked["approval_id"]}
    async with TetherClient(stack.child("brain").url) as client:
        async for event in client.events(run_id, after=0):
            if event.kind == "tool.approval_needed" and event.data["approval_id"] not in seen:
                seen.add(event.data["approval_id"])
                assert event.data["name"] == CONFIRMED_TOOL, "the granted tool was asked again"
                await decide(stack, event.data["approval_id"], "allow_once")
            if event.kind == "run.end":
                break
    status, events = await finish(stack, run_id)
    assert status == "completed"
    assert [r["ok"] for r in event_data(events, "tool.result")] == [True, True, True]


async def run_unasked(stack: Supervisor, scripts: Path, turns: list[Turn]) -> list[RunEvent]:
    """The run's events to its end; it fails at once if the run asks an operator."""
    model = write_script(scripts, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("look at my notes", provider="scripted", model=model)
        events = []
        async for event in client.events(accepted.run_id):
            assert event.kind != "tool.approval_needed", event.data
            events.append(event)
        assert (await client.get_run(accepted.run_id)).status == "completed", events[-1].data
    return events


async def test_a_first_run_reads_the_workspace_without_asking(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """The default agent with nothing granted reads, lists and searches the workspace
    `tether up` gives the runner at once: no card, every result from the runner."""
    workspace = Path(stack.env["TETHER_RUNNER_WORKSPACE"])
    (workspace / "first-run.txt").write_text("hello from the workspace\n")
    turns = [
        [call("file_read", path="first-run.txt")],
        [call("file_list")],
        [call("file_search", pattern="hello from")],
        say("read"),
    ]
    events = await run_unasked(stack, scripts_dir, turns)
    results = {r["name"]: r for r in event_data(events, "tool.result")}
    assert set(results) == {"file_read", "file_list", "file_search"}
    assert all(r["ok"] for r in results.values()), results
    assert "hello from the workspace" in results["file_read"]["content"]
    assert "first-run.txt" in results["file_list"]["content"]
    assert "first-run.txt:1:" in results["file_search"]["content"]


async def test_a_first_run_write_asks_with_its_diff_and_allow_once_applies_it(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """A write asks, saying why in plain words, with its staged change on the card; an
    `allow_once` from the approvals API applies it and the model reads an ok result."""
    workspace = Path(stack.env["TETHER_RUNNER_WORKSPACE"])
    written = call("file_write", path="first-write.txt", content="approved\n")
    run_id, asked = await park(stack, scripts_dir, [[written], say("written")])
    assert (asked["name"], asked["code"]) == ("file_write", "not_granted")
    assert "agent default has none for it, so an operator approves each call" in asked["reason"]
    async with httpx.AsyncClient(timeout=10) as client:
        card = await client.get(
            f"{stack.child('approvals').url}/v1/approvals/{asked['approval_id']}",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    changes = card.json()["changes"]
    assert [(e["path"], e["change"]) for e in changes["entries"]] == [
        ("first-write.txt", "created")
    ]
    assert not (workspace / "first-write.txt").exists()  # staged, not applied
    assert (await decide(stack, asked["approval_id"], "allow_once")).status_code == 200
    status, events = await finish(stack, run_id)
    assert status == "completed"
    result = [r for r in event_data(events, "tool.result") if r["call_id"] == written["id"]]
    assert [r["ok"] for r in result] == [True], result
    assert (workspace / "first-write.txt").read_text() == "approved\n"


async def test_an_approved_call_sent_again_is_not_refused_by_the_gate_it_passed(
    stack: Supervisor, scripts_dir: Path, stack_bus: Bus
) -> None:
    """The runner stops answering while an approved (idempotent) call runs: the brain
    finds it lost and sends it again through every gate. The approval still answers the
    gate it answered (not `FAILED: org_confirm` in 0 ms), and the call's second send runs."""
    runner = stack.child("tools-runner").proc
    assert runner is not None
    sends = await stack_bus.subscribe_raw(stack_bus.subjects.tool_execute.subject)
    run_id, asked = await park(stack, scripts_dir, [[call(CONFIRMED_TOOL, **CONVERT)], say("ok")])
    os.kill(runner.pid, signal.SIGSTOP)
    try:
        assert (await decide(stack, asked["approval_id"], "allow_once")).status_code == 200
        first = await sends.next_msg(timeout=30)
        # Lost after the tool timeout; sent again a second later, unless the gates refuse.
        again = await sends.next_msg(timeout=TOOL_TIMEOUT_S + 30)
        assert again.data == first.data
    finally:
        os.kill(runner.pid, signal.SIGCONT)
        await sends.unsubscribe()
    status, events = await finish(stack, run_id)
    assert status == "completed"
    result = [r for r in event_data(events, "tool.result") if r["name"] == CONFIRMED_TOOL]
    assert [r["ok"] for r in result] == [True], result
    assert "Asia/Tokyo" in result[0]["content"]
