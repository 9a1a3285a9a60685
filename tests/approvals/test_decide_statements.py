"""The way from an operator's decision to its tool, counted (issue 33): an operator's
decision is at most four statements with its audit record, event, trail head and
notices, and its commit is the only one on the way that waits for the disk (the outbox
mark after the publish does not); spending it is at most three. The semantics stay: the
proof verifies, the trail is intact, a decision and a spend count once, and what the
shortcut cannot decide (expired, a quorum, a delete to remember, out of reach) is
refused as before, leaving nothing behind.

Runs the lifecycle in this process on a database of its own, with SQLAlchemy's events
counting what each transaction sends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.decisions.announcing import _mark_published
from tether_approvals.decisions.lifecycle import Lifecycle
from tether_approvals.notices.outbox import Notices
from tether_approvals.persistence.tables import (
    approval_events,
    approvals,
    notice_outbox,
    webhook_endpoints,
)
from tether_approvals.persistence.trail import head_of, run_trail
from tether_approvals.settings import WebhookSettings
from tether_common import audit
from tether_common.errors import ConflictError, TetherError
from tether_common.messages.approvals import (
    ApprovalDecided,
    ApprovalView,
    ConsumeApproval,
    CreateApproval,
    Decision,
)

TENANT = "stmts"
OPERATOR = Principal(name="op", role="approver", tenant=TENANT)


@dataclass
class Sent:
    """What went to PostgreSQL, one list of statements per transaction."""

    transactions: list[list[str]] = field(default_factory=list)

    def statements(self) -> list[int]:
        return [len(t) for t in self.transactions]


@contextmanager
def counted(engine: AsyncEngine) -> Iterator[Sent]:
    sent = Sent()

    def began(_conn: Any) -> None:
        sent.transactions.append([])

    def executed(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        sent.transactions[-1].append(statement)

    sync = engine.sync_engine
    event.listen(sync, "begin", began)
    event.listen(sync, "before_cursor_execute", executed)
    try:
        yield sent
    finally:
        event.remove(sync, "begin", began)
        event.remove(sync, "before_cursor_execute", executed)


@pytest.fixture(scope="module")
async def lifecycle(engine: AsyncEngine) -> Lifecycle:
    """Notices on (one webhook endpoint of the tenant hears every decision), as served."""
    announced: list[ApprovalDecided] = []

    async def publish(decided: ApprovalDecided) -> None:
        announced.append(decided)

    async with engine.begin() as conn:
        await conn.execute(
            webhook_endpoints.insert().values(
                endpoint_id=f"whe_{uuid.uuid4().hex[:12]}",
                tenant=TENANT,
                url="https://hooks.example/x",
                secret="s",
                events=["approval.decided", "approval.requested"],
                created_at=datetime.now(UTC),
                created_by="test",
            )
        )
    notices = Notices("http://console.example", WebhookSettings(), "tether.approvals.notices")
    return Lifecycle(engine, publish, default_expiry_s=60, notices=notices)


async def ask(lifecycle: Lifecycle, run_id: str | None = None, **fields: Any) -> ApprovalView:
    return await lifecycle.create(
        CreateApproval(
            run_id=run_id or f"r_{uuid.uuid4().hex[:10]}",
            step=1,
            tool="write_file",
            args={"path": "notes.txt"},
            reason="writes a file",
            action_digest=uuid.uuid4().hex,
            tenant=TENANT,
            **fields,
        )
    )


async def intact(engine: AsyncEngine, run_id: str) -> None:
    trail = run_trail(run_id)
    assert await audit.verify(engine, trail, await head_of(engine, trail)) == []


@pytest.mark.parametrize("decision", ["allow_once", "allow_run", "allow_chat", "deny"])
async def test_a_decision_is_four_statements_and_one_commit_waits_for_the_disk(
    lifecycle: Lifecycle, engine: AsyncEngine, decision: Decision
) -> None:
    item = await ask(lifecycle)
    with counted(engine) as sent:
        decided = await lifecycle.decide(OPERATOR, item.approval_id, decision, "ok")
    (decide, mark) = sent.transactions
    assert len(decide) <= 4, decide
    assert len(mark) == 1
    async with engine.begin() as conn:  # the mark's commit alone does not wait
        await _mark_published(conn, item.approval_id, flush=False)
        setting = (await conn.execute(select(func.current_setting("synchronous_commit")))).one()
    assert setting == ("off",)
    assert decided.status == ("denied" if decision == "deny" else "granted")
    assert decided.decided_by == OPERATOR.label
    assert lifecycle.verified(decided)
    await intact(engine, item.run_id)
    async with engine.connect() as conn:
        row = (
            await conn.execute(select(approvals).where(approvals.c.approval_id == item.approval_id))
        ).one()
        kinds = (
            (
                await conn.execute(
                    select(approval_events.c.kind).where(
                        approval_events.c.approval_id == item.approval_id
                    )
                )
            )
            .scalars()
            .all()
        )
        sinks = (
            (
                await conn.execute(
                    select(notice_outbox.c.sink).where(
                        notice_outbox.c.approval_id == item.approval_id,
                        notice_outbox.c.kind == "approval.decided",
                    )
                )
            )
            .scalars()
            .all()
        )
    assert lifecycle.verified(row)  # the proof is on the row, as committed
    assert row.published_at is not None
    assert sorted(kinds) == ["created", "decided"]
    assert sorted(sinks) == ["nats", "webhook"]


async def test_a_spend_is_three_statements_and_counts_once(
    lifecycle: Lifecycle, engine: AsyncEngine
) -> None:
    item = await ask(lifecycle)
    await lifecycle.decide(OPERATOR, item.approval_id, "allow_once", None)
    spend = ConsumeApproval(approval_id=item.approval_id, action_digest=item.action_digest)
    with counted(engine) as sent:
        first = await lifecycle.consume(spend)
    assert first.outcome == "consumed"
    assert sent.statements() == [3], sent.transactions
    assert (await lifecycle.consume(spend)).outcome == "already_consumed"
    await intact(engine, item.run_id)


async def test_a_decision_counts_once_when_two_arrive_together(
    lifecycle: Lifecycle, engine: AsyncEngine
) -> None:
    item = await ask(lifecycle)
    found = await asyncio.gather(
        *(lifecycle.decide(OPERATOR, item.approval_id, d, None) for d in ("allow_once", "deny")),
        return_exceptions=True,
    )
    refused = [f for f in found if isinstance(f, ConflictError)]
    assert len(refused) == 1
    assert refused[0].code == "already_decided"
    await intact(engine, item.run_id)


async def test_appends_to_one_run_trail_stay_in_one_chain(
    lifecycle: Lifecycle, engine: AsyncEngine
) -> None:
    """Decisions (their trail lock taken inside the UPDATE, by PostgreSQL's key) and
    other records of the same run (`audit.append`'s key) at once: one intact chain."""
    run_id = f"r_{uuid.uuid4().hex[:10]}"
    items = [await ask(lifecycle, run_id) for _ in range(6)]

    async def note(n: int) -> None:
        async with engine.begin() as conn:
            await lifecycle.transitions.trail(conn, items[0], "approval.note", {"n": n})

    await asyncio.gather(
        *(lifecycle.decide(OPERATOR, i.approval_id, "allow_once", None) for i in items),
        *(note(n) for n in range(6)),
    )
    await intact(engine, run_id)
    assert await _records(engine, run_id) == 6 + 6  # a decision and a note each


async def _records(engine: AsyncEngine, run_id: str) -> int:
    trail = audit.records.c.run_id == run_trail(run_id)
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).where(trail))).scalar_one())


async def _state(engine: AsyncEngine, item: ApprovalView) -> tuple[Any, ...]:
    """What a refused decision must leave as it was: the row's decision, its events,
    its notices and (but for a refusal the trail keeps) its run's trail."""
    one = approvals.c.approval_id == item.approval_id
    async with engine.connect() as conn:
        row = (await conn.execute(select(approvals).where(one))).one()
        events = await conn.execute(
            select(func.count()).where(approval_events.c.approval_id == item.approval_id)
        )
        told = await conn.execute(
            select(func.count()).where(notice_outbox.c.approval_id == item.approval_id)
        )
        counts = (events.scalar_one(), told.scalar_one())
    return (row.status, row.decision, row.proof, row.votes, *counts)


@pytest.mark.parametrize(
    ("case", "code", "trail_grows"),
    [
        ("another tenant's operator", "not_found", False),
        ("a delete remembered", "delete_not_remembered", False),
        ("decided already", "already_decided", False),
        ("the requester of a two-key request", "requester_cannot_approve", True),
    ],
)
async def test_what_the_shortcut_cannot_decide_is_refused_leaving_nothing(
    lifecycle: Lifecycle, engine: AsyncEngine, case: str, code: str, trail_grows: bool
) -> None:
    who: Principal = OPERATOR
    decision: Decision = "allow_once"
    match case:
        case "another tenant's operator":
            item = await ask(lifecycle)
            who = Principal(name="eve", role="approver", tenant="elsewhere")
        case "a delete remembered":
            item = await ask(lifecycle, scope="delete")
            decision = "allow_run"
        case "decided already":
            item = await ask(lifecycle)
            await lifecycle.decide(OPERATOR, item.approval_id, "deny", None)
        case _:
            item = await ask(lifecycle, requested_by="op", quorum={"needed": 2})
    before, records = await _state(engine, item), await _records(engine, item.run_id)
    with pytest.raises(TetherError) as caught:
        await lifecycle.decide(who, item.approval_id, decision, None)
    assert caught.value.code == code
    assert await _state(engine, item) == before
    assert await _records(engine, item.run_id) == records + trail_grows
    await intact(engine, item.run_id)


async def test_one_key_of_two_is_a_vote_not_a_decision(lifecycle: Lifecycle) -> None:
    item = await ask(lifecycle, requested_by="someone", quorum={"needed": 2})
    voted = await lifecycle.decide(OPERATOR, item.approval_id, "allow_once", None)
    assert (voted.status, voted.decision, [v.by for v in voted.approvals]) == (
        "pending",
        None,
        [OPERATOR.label],
    )


async def test_an_expired_request_is_expired_not_decided(
    lifecycle: Lifecycle, engine: AsyncEngine
) -> None:
    item = await ask(lifecycle, expires_in_s=0.05)
    await asyncio.sleep(0.1)
    with pytest.raises(ConflictError) as caught:
        await lifecycle.decide(OPERATOR, item.approval_id, "allow_once", None)
    assert caught.value.code == "expired"
    assert (await _state(engine, item))[:2] == ("expired", "expired")
    await intact(engine, item.run_id)
