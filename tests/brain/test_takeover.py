"""Runs survive their replica: SIGKILL (lease expiry, takeover) and SIGTERM (hand-back),
with two brain replicas as real processes."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Child, Supervisor
from tether_common.messages.runs import RunEvent
from tether_common.testing import Turn, call, say, write_script

pytestmark = pytest.mark.e2e

LEASE_S = 1.0


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_LEASE_S": str(LEASE_S),
        "TETHER_BRAIN_DRAIN_S": "5",
        "TETHER_BRAIN_AGENTS": json.dumps({"ops": {"grants": ["shell#noapproval"]}}),
        # A runner killed mid-call leaves its claim on the call's key; after this long
        # the key answers `in_doubt` (the card's test below).
        "TETHER_RUNNER_EFFECT_LEASE_S": "2",
    }


async def victim(stack: Supervisor) -> Child:
    child = stack.add_replica("brain")
    await stack.start_child(child)
    await stack.wait_ready(children=[child])
    return child


async def follow(url: str, run_id: str, after: int = 0) -> list[RunEvent]:
    async with TetherClient(url) as client:
        return [e async for e in client.events(run_id, after=after)]


SLOW_SECOND_TURN: list[Turn] = [
    [call("current_time", timezone="Asia/Tokyo")],
    [{"pause_s": 2.0}, {"kind": "chunk", "text": "done after the crash"}],
]


async def start_and_wait_for_tool(url: str, model: str) -> tuple[str, list[RunEvent]]:
    async with TetherClient(url) as client:
        accepted = await client.start_run("time in Tokyo", provider="scripted", model=model)
        seen: list[RunEvent] = []
        async for event in client.events(accepted.run_id):
            seen.append(event)
            if event.kind == "tool.result":
                break
    return accepted.run_id, seen


async def test_sigkill_mid_run_is_taken_over(
    stack: Supervisor, scripts_dir: Path, database_url: str
) -> None:
    doomed = await victim(stack)
    model = write_script(scripts_dir, SLOW_SECOND_TURN)
    run_id, before = await start_and_wait_for_tool(doomed.url, model)
    await asyncio.sleep(0.3)  # the slow second model turn is under way on the doomed replica
    assert doomed.proc is not None
    doomed.proc.kill()
    killed_at = time.monotonic()

    survivor = stack.child("brain").url
    after = await follow(survivor, run_id, after=before[-1].seq)
    took = time.monotonic() - killed_at
    async with TetherClient(survivor) as client:
        run = await client.get_run(run_id)
    assert run.status == "completed"
    assert run.answer == "done after the crash"
    assert [s.kind for s in run.steps] == ["model", "tool", "model"]
    seqs = [e.seq for e in before + after]
    assert seqs == list(range(1, len(seqs) + 1)), "events lost or duplicated"
    assert took < LEASE_S * 3 + 2.0 + 5.0  # lease expiry + sweep + the redone 2 s turn, with slack

    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        row = await conn.fetchrow(
            "SELECT fence, takeovers, lease_owner FROM runs WHERE run_id = $1", run_id
        )
    finally:
        await conn.close()
    assert row is not None
    assert row["fence"] == 2
    assert row["lease_owner"] is None


async def test_sigterm_hands_runs_back_at_once(stack: Supervisor, scripts_dir: Path) -> None:
    leaving = await victim(stack)
    model = write_script(scripts_dir, SLOW_SECOND_TURN)
    run_id, before = await start_and_wait_for_tool(leaving.url, model)
    await asyncio.sleep(0.3)
    code = await stack.stop_child(leaving)
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a clean shutdown
    survivor = stack.child("brain").url
    after = await follow(survivor, run_id, after=before[-1].seq)
    assert after[-1].kind == "run.end"
    assert after[-1].data["status"] == "completed"
    seqs = [e.seq for e in before + after]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_run_finishes_once_with_two_replicas_racing(
    stack: Supervisor, scripts_dir: Path
) -> None:
    other = await victim(stack)
    model = write_script(scripts_dir, [say("only once")])
    urls = [stack.child("brain").url, other.url]
    async with TetherClient(urls[0]) as first, TetherClient(urls[1]) as second:
        accepted = await asyncio.gather(
            *(
                c.start_run(f"run {i}", provider="scripted", model=model)
                for i, c in enumerate([first, second] * 5)
            )
        )
    for item in accepted:
        events = await follow(urls[0], item.run_id)
        assert [e.kind for e in events].count("run.end") == 1
    await stack.stop_child(other)


@pytest.mark.parametrize(("decision", "outcome"), [("deny", "in_doubt"), ("allow_once", None)])
async def test_a_call_in_doubt_gets_a_reconcile_card(
    stack: Supervisor, scripts_dir: Path, decision: str, outcome: str | None
) -> None:
    """A non-idempotent call in flight when its replica and its runner both died is
    never re-run blindly (its outcome was never recorded): an operator decides to run it
    again or to leave it as it is. With the runner alive, the new replica would get the
    recorded outcome instead (tests/chaos/test_faults.py)."""
    doomed = await victim(stack)
    turns: list[Turn] = [[call("shell", command="sleep 3; echo done")], say("reconciled")]
    model = write_script(scripts_dir, turns)
    async with TetherClient(doomed.url) as client:
        accepted = await client.start_run("run it", provider="scripted", model=model, agent="ops")
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.call":
                break
    await asyncio.sleep(0.8)
    assert doomed.proc is not None
    doomed.proc.kill()
    runner = stack.child("tools-runner")
    assert runner.proc is not None
    runner.proc.kill()  # mid-call too: nobody recorded whether the command ran
    await runner.proc.wait()
    await stack.start_child(runner)
    await stack.wait_ready(timeout=90, children=[runner])
    survivor = stack.child("brain").url
    async with TetherClient(survivor) as client:
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.approval_needed":
                card = event.data
                break
    assert card["code"] == "in_doubt"
    async with httpx.AsyncClient(timeout=10) as http:
        decided = await http.post(
            f"{stack.child('approvals').url}/v1/approvals/{card['approval_id']}/decision",
            json={"decision": decision},
            headers={"Authorization": "Bearer test-operator-token"},
        )
    assert decided.status_code == 200
    events = await follow(survivor, accepted.run_id)
    assert events[-1].data["status"] == "completed"
    result = [e.data for e in events if e.kind == "tool.result"][-1]
    assert result["error_code"] == outcome
    if outcome is None:
        assert "done" in result["content"]


async def test_a_crash_mid_child_is_taken_over_and_the_parent_resumes(
    stack: Supervisor, scripts_dir: Path
) -> None:
    doomed = await victim(stack)
    turns: list[Turn] = [[call("run_agent", task="slow child")], say("parent after the crash")]
    helpers: dict[str, list[Turn]] = {
        "slow child": [[{"pause_s": 2.0}, {"kind": "chunk", "text": "child survived"}]]
    }
    model = write_script(scripts_dir, turns, helpers)
    async with TetherClient(doomed.url) as client:
        accepted = await client.start_run("go", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "agent.start":
                break
    await asyncio.sleep(0.5)  # the child's model turn is under way on the doomed replica
    assert doomed.proc is not None
    doomed.proc.kill()
    events = await follow(stack.child("brain").url, accepted.run_id)
    assert events[-1].data["status"] == "completed"
    assert events[-1].data["answer"] == "parent after the crash"
    result = [e.data for e in events if e.kind == "tool.result"][-1]
    assert (result["name"], result["content"]) == ("run_agent", "child survived")


async def test_a_replica_killed_during_prefetch_never_runs_its_call_twice(
    stack: Supervisor, scripts_dir: Path, database_url: str
) -> None:
    """An agent's prefetch goes the way of a model's calls: its (non-idempotent) shell
    call is journaled before it is sent, so the replica that takes the run over sends it
    again with the same idempotency key and the runner answers the recorded outcome
    instead of running it again (one claim, one attempt); the model's first turn then
    reads that result (issue 31)."""
    agent = f"prefetcher-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=30) as http:
        made = await http.post(
            "/v1/agents",
            json={
                "id": agent,
                "grants": ["shell#noapproval"],
                "prefetch": [{"tool": "shell", "arguments": {"command": "sleep 2; echo ran"}}],
            },
            headers={"Authorization": "Bearer test-operator-token"},
        )
    assert made.status_code == 201, made.text
    doomed = await victim(stack)
    # The prefetch's calls are the history's first assistant message: the model's first
    # turn is the script's second.
    model = write_script(scripts_dir, [say("never asked"), say("prefetched once")])
    async with TetherClient(doomed.url) as client:
        accepted = await client.start_run("go", provider="scripted", model=model, agent=agent)
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.call":
                assert (event.data["step"], event.data["call_id"]) == (0, "prefetch_0")
                break
    await asyncio.sleep(0.8)  # the command is under way on the runner
    assert doomed.proc is not None
    doomed.proc.kill()
    events = await follow(stack.child("brain").url, accepted.run_id)
    assert events[-1].data["status"] == "completed", events[-1].data
    assert events[-1].data["answer"] == "prefetched once"
    kinds = [e.kind for e in events]
    assert "tool.approval_needed" not in kinds  # the outcome was known: no reconcile card
    results = [e.data for e in events if e.kind == "tool.result"]
    assert [(r["call_id"], r["ok"]) for r in results] == [("prefetch_0", True)]
    assert "ran" in results[0]["content"]
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        claims = await conn.fetch(
            "SELECT attempt FROM tool_effects WHERE run_id = $1", accepted.run_id
        )
    finally:
        await conn.close()
    assert [c["attempt"] for c in claims] == [1]
