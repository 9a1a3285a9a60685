"""An approval written outside the approvals service never resumes a run.

The attack, through the real services: a run parks a call for an operator; an attacker
with SQL access to the shared database marks the approval `granted` (with no proof, a
made-up one, or one copied from a genuine decision) and waits for the sweeper to
announce it, or tries to spend it; or publishes decisions on the decisions subject
directly. None of it runs the parked call: the run stays parked, every attempt is in a
trail. A genuine decision by an operator still resumes the run afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from shipped import observe
from tether_approvals.testing import ApprovalsHarness, auth
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.decisions import DecisionFacts, DecisionKey
from tether_common.messages.approvals import ApprovalDecided, ApprovalView, ConsumeApproval
from tether_common.messages.runs import RunEvent
from tether_common.testing import call, event_data, say, until, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN
PARKED_TOOL = "convert_time"
ARGS = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
# A bound on waiting for the services to handle what the test did; never a speed claim.
SETTLE_S = 60.0


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({PARKED_TOOL: "confirm"}),
        "TETHER_APPROVALS_SWEEP_INTERVAL_S": "0.2",
        "TETHER_APPROVALS_REPUBLISH_AFTER_S": "0.2",
    }


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """The attacker's SQL session (the suite's own credentials: how they got them is
    beside the point here; tests/deploy/test_local_credentials.py shows they are needed)."""
    conn = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def attacker_bus(stack: Supervisor) -> AsyncIterator[Bus]:
    # Every right on the bus (the observer): an attacker who holds a service's NATS
    # credentials, short of the decision key, still cannot make a decision count.
    async with await observe(stack, "attacker") as bus:
        yield bus


async def park(stack: Supervisor, scripts: Path) -> tuple[str, dict[str, Any]]:
    model = write_script(scripts, [[call(PARKED_TOOL, **ARGS)], say("converted")])
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("convert a time", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.approval_needed":
                return accepted.run_id, event.data
            assert event.kind != "run.end", event.data
    raise AssertionError("the run never asked")


async def records(db: asyncpg.Connection, trail: str, event: str) -> int:
    found = await db.fetchval(
        "SELECT count(*) FROM audit_records WHERE run_id = $1 AND event = $2", trail, event
    )
    return int(found)


async def wait_for_records(db: asyncpg.Connection, trail: str, event: str, count: int) -> None:
    await until(
        lambda: records(db, trail, event),
        done=lambda found: found >= count,
        timeout=SETTLE_S,
        every=0.1,
        what=f"{count} x {event} in the trail {trail}",
    )


async def assert_still_parked(db: asyncpg.Connection, run_id: str) -> None:
    """Parked, held by no replica, and the parked call never approved nor run."""
    row = await db.fetchrow("SELECT status, lease_owner FROM runs WHERE run_id = $1", run_id)
    assert row is not None
    assert (row["status"], row["lease_owner"]) == ("awaiting_approval", None)
    after_park = await db.fetchval(
        "SELECT count(*) FROM run_journal WHERE run_id = $1 AND kind = 'event'"
        " AND data->>'kind' IN ('tool.approved', 'tool.denied', 'tool.result')",
        run_id,
    )
    assert after_park == 0


async def decide(stack: Supervisor, approval_id: str, decision: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json={"decision": decision},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )


async def finish(stack: Supervisor, run_id: str) -> tuple[str, list[RunEvent]]:
    async with TetherClient(stack.child("brain").url) as client:
        events = [e async for e in client.events(run_id)]
        return (await client.get_run(run_id)).status, events


@pytest.fixture(scope="module")
async def genuine(stack: Supervisor, scripts_dir: Path, database_url: str) -> asyncpg.Record:
    """A decision the approvals service really made (about another run), as stored."""
    run_id, asked = await park(stack, scripts_dir)
    assert (await decide(stack, asked["approval_id"], "deny")).status_code == 200
    await finish(stack, run_id)
    conn = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        row = await conn.fetchrow(
            "SELECT * FROM approvals WHERE approval_id = $1", asked["approval_id"]
        )
    finally:
        await conn.close()
    assert row is not None
    assert str(row["proof"]).startswith("v1:")
    return row


async def test_a_connection_without_the_password_is_refused(database_url: str) -> None:
    """The first step of the attack (any local account connecting) no longer works."""
    without = database_url.replace("+asyncpg", "", 1)
    scheme, rest = without.split("://", 1)
    credentials, where = rest.split("@", 1)
    user = credentials.split(":", 1)[0]
    for attempt in (f"{scheme}://{user}@{where}", f"{scheme}://{user}:wrong@{where}"):
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(attempt)


async def test_an_approval_row_forged_in_the_database_never_runs_the_call(
    stack: Supervisor,
    scripts_dir: Path,
    db: asyncpg.Connection,
    attacker_bus: Bus,
    genuine: asyncpg.Record,
) -> None:
    forged_rows = [
        ("allow_once", None),  # no proof at all
        ("allow_run", ""),
        ("allow_chat", "v1:" + "0" * 64),  # a made-up one
        ("allow_once", genuine["proof"]),  # copied from a genuine decision
        ("deny", genuine["proof"]),  # even the genuine decision's own value
    ]
    parked = await asyncio.gather(*(park(stack, scripts_dir) for _ in forged_rows))
    for (decision, proof), (run_id, asked) in zip(forged_rows, parked, strict=True):
        approval_id = asked["approval_id"]
        await db.execute(
            "UPDATE approvals SET status = 'granted', decision = $2, decided_by = 'mallory',"
            " decided_at = $3, published_at = NULL, proof = $4 WHERE approval_id = $1",
            approval_id,
            decision,
            datetime.now(UTC) - timedelta(minutes=1),
            proof,
        )
        # The sweeper finds the unsent decision, refuses to announce it, says so.
        await wait_for_records(db, f"approvals:{run_id}", "approval.forged_refused", 1)
        await assert_still_parked(db, run_id)
        # Nor can the forged grant be spent (the brain's own last step before it runs).
        digest = await db.fetchval(
            "SELECT action_digest FROM approvals WHERE approval_id = $1", approval_id
        )
        spent = await attacker_bus.request(
            attacker_bus.subjects.approval_consume,
            ConsumeApproval(approval_id=approval_id, action_digest=digest),
        )
        assert spent.outcome == "approval_unverified", (decision, proof)
        assert (
            await db.fetchval(
                "SELECT consumed_at FROM approvals WHERE approval_id = $1", approval_id
            )
            is None
        )
        await assert_still_parked(db, run_id)


async def test_forged_decision_messages_are_refused_and_a_genuine_one_still_resumes(
    stack: Supervisor,
    scripts_dir: Path,
    db: asyncpg.Connection,
    attacker_bus: Bus,
    genuine: asyncpg.Record,
) -> None:
    run_id, asked = await park(stack, scripts_dir)
    approval_id = asked["approval_id"]
    digest = await db.fetchval(
        "SELECT action_digest FROM approvals WHERE approval_id = $1", approval_id
    )
    now = datetime.now(UTC)
    real_key = DecisionKey(os.environ["TETHER_DECISION_KEY"])

    def message(proof: str | None, **change: Any) -> ApprovalDecided:
        base: dict[str, Any] = {
            "approval_id": approval_id,
            "run_id": run_id,
            "step": 1,
            "decision": "allow_once",
            "action_digest": digest,
            "decided_by": "mallory",
            "ts": now,
            "proof": proof,
        }
        return ApprovalDecided.model_validate(base | change)

    def signed(key: DecisionKey, **change: Any) -> ApprovalDecided:
        unsigned = message(None, **change)
        facts = DecisionFacts(
            unsigned.approval_id,
            unsigned.run_id,
            unsigned.action_digest,
            unsigned.decision,
            unsigned.ts,
        )
        return unsigned.model_copy(update={"proof": key.sign(facts)})

    forged = [
        message(None),
        message(""),
        message("v1:" + "f" * 64),
        message(genuine["proof"]),  # a genuine proof, about something else
        signed(DecisionKey.generate()),  # a well-made proof by some other key
        # The genuine decision replayed word for word, but aimed at this run.
        message(
            genuine["proof"],
            approval_id=genuine["approval_id"],
            action_digest=genuine["action_digest"],
            decision=genuine["decision"],
            ts=genuine["decided_at"],
        ),
        # Signed by the real key (as if leaked into a replay), but about another
        # approval, or another action: the run waits on neither.
        signed(real_key, approval_id="apr_" + "0" * 32),
        signed(real_key, action_digest="0" * 64),
    ]
    subject = attacker_bus.subjects.approval_decided
    for n, decided in enumerate(forged, start=1):
        await attacker_bus.js_publish(subject, decided, msg_id=f"forged-{run_id}-{n}")
        await wait_for_records(db, run_id, "approval.decision_refused", n)
        await assert_still_parked(db, run_id)
    reasons = await db.fetch(
        "SELECT data::jsonb->>'refused' AS refused FROM audit_records WHERE run_id = $1"
        " AND event = 'approval.decision_refused' ORDER BY seq",
        run_id,
    )
    assert [r["refused"] for r in reasons] == ["decision_unverified"] * 6 + [
        "decision_mismatch"
    ] * 2

    assert (await decide(stack, approval_id, "allow_once")).status_code == 200
    status, events = await finish(stack, run_id)
    assert status == "completed"
    assert event_data(events, "tool.approved")[0]["by"] != "mallory"
    result = [r for r in event_data(events, "tool.result") if r["name"] == PARKED_TOOL][-1]
    assert result["ok"] is True


async def test_no_service_logs_the_database_password(
    stack: Supervisor, database_url: str, genuine: asyncpg.Record
) -> None:
    """The URL handed to every service carries the password; no log line repeats it
    (after a whole run, decided and ended: `genuine`)."""
    password = database_url.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
    assert password
    assert genuine["run_id"]
    assert stack.log_dir is not None
    logs = sorted(stack.log_dir.glob("*.log"))
    assert logs
    for log_file in logs:
        assert password not in log_file.read_text(errors="replace"), log_file.name


async def test_every_kind_of_decision_is_signed(approvals: ApprovalsHarness) -> None:
    """An operator's, each automated approver's and expiry's decisions carry a proof that
    the brain's key verifies, on the stored row and on the announced message; a changed
    fact fails.

    The expiry is made by whichever approvals service sweeps first, and other tests'
    services (other subject prefixes) share this database: so the expiry's announcement
    may go out under another prefix. Its stored row is checked either way."""
    key = DecisionKey(os.environ["TETHER_DECISION_KEY"])
    by_operator = await approvals.create()
    await approvals.decide(by_operator.approval_id, "allow_run")
    by_rule = await approvals.create(tool="auto_ok_tool")  # rule `auto-ok`: allow_once
    by_deny_rule = await approvals.create(danger="destructive")  # rule `no-rm`: deny
    by_expiry = await approvals.create(expires_in_s=0.3)
    for created, decision, announced_here in (
        (by_operator, "allow_run", True),
        (by_rule, "allow_once", True),
        (by_deny_rule, "deny", True),
        (by_expiry, "expired", False),
    ):
        stored = await _stored_decision(approvals, created.approval_id)
        assert stored.decision == decision
        assert stored.decided_at is not None
        assert stored.proof is not None
        facts = DecisionFacts(
            stored.approval_id, stored.run_id, stored.action_digest, decision, stored.decided_at
        )
        assert key.verify(facts, stored.proof), decision
        if announced_here:
            announced = await approvals.decided(created.approval_id)
            assert (announced.decision, announced.proof) == (decision, stored.proof)
            assert announced.ts == stored.decided_at
        for changed in (
            {"decision": "allow_chat" if decision != "allow_chat" else "deny"},
            {"run_id": stored.run_id + "x"},
            {"action_digest": "0" * 64},
            {"approval_id": "apr_other"},
            {"decided_at": stored.decided_at + timedelta(microseconds=1)},
        ):
            assert not key.verify(replace(facts, **changed), stored.proof), changed
        assert not DecisionKey.generate().verify(facts, stored.proof)


async def _stored_decision(approvals: ApprovalsHarness, approval_id: str) -> ApprovalView:
    """The approval as stored, once it has a decision (bounded wait)."""

    async def stored() -> ApprovalView:
        response = await approvals.http.get(
            f"/v1/approvals/{approval_id}", headers=auth(approvals.admin_token)
        )
        assert response.status_code == 200, response.text
        return ApprovalView.model_validate(response.json())

    return await until(
        stored,
        done=lambda view: view.decision is not None,
        timeout=15,
        every=0.1,
        what=f"{approval_id} decided",
    )
