"""Approvals: the pending gauge follows the rows in PostgreSQL; decision latency is
recorded by decision for operators' answers and expiries, never for automated ones."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import tether_approvals
from tether_approvals.auth import Principal
from tether_approvals.decisions.lifecycle import Lifecycle
from tether_approvals.decisions.rules import build_approvers
from tether_approvals.persistence.pending import PendingGauge
from tether_approvals.settings import ApproverRule
from tether_common import identity
from tether_common.db import make_engine, migrate
from tether_common.messages.approvals import ApprovalDecided, ApprovalView, CreateApproval

Sum = Callable[..., float]
Histogram = Callable[..., tuple[int, float]]
PENDING = "tether.approvals.pending"
DECISION = "tether.approval.decision.duration"
OPERATOR = Principal(name="op", role="approver")


@pytest.fixture(scope="module")
async def engine(own_database_url: str) -> AsyncIterator[AsyncEngine]:
    db = make_engine(own_database_url, pool_size=2)
    await identity.migrate(db)  # first, as every service does: approvals moved its tokens there
    await migrate(db, Path(tether_approvals.__file__).parent / "migrations", "alembic_approvals")
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture(scope="module")
def lifecycle(engine: AsyncEngine) -> Lifecycle:
    async def publish(_decided: ApprovalDecided) -> None:
        return None

    rule = ApproverRule(name="auto", tool="auto_*", answer="allow_once")
    return Lifecycle(engine, publish, default_expiry_s=60, approvers=build_approvers([rule], []))


async def create(
    lifecycle: Lifecycle, tool: str, expires_in_s: float | None = None
) -> ApprovalView:
    return await lifecycle.create(
        CreateApproval(
            run_id=f"r_{uuid.uuid4().hex[:8]}",
            step=1,
            tool=tool,
            args={"path": "/tmp/x"},
            reason="writes a file",
            action_digest=uuid.uuid4().hex,
            expires_in_s=expires_in_s,
        )
    )


async def test_the_pending_gauge_is_the_count_of_pending_rows(
    lifecycle: Lifecycle, engine: AsyncEngine, metric_sum: Sum
) -> None:
    gauge = PendingGauge(engine)
    base = metric_sum(PENDING)
    assert await gauge.refresh() == 0

    first = await create(lifecycle, "write_file")
    await create(lifecycle, "write_file")
    await create(lifecycle, "auto_ok")  # answered at once: never pending
    assert await gauge.refresh() == 2
    assert metric_sum(PENDING) == base + 2

    await lifecycle.decide(OPERATOR, first.approval_id, "deny", None)
    assert await gauge.refresh() == 1
    assert metric_sum(PENDING) == base + 1

    # A replica that restarts reports the whole count from its first tick (in-memory
    # +1/-1 bookkeeping would start from 0 and go negative at the next decision).
    restarted = PendingGauge(engine)
    assert await restarted.refresh() == 1


async def test_decision_latency_by_decision_for_operators_and_expiry(
    lifecycle: Lifecycle, metric_histogram: Histogram
) -> None:
    allowed_before = metric_histogram(DECISION, decision="allow_once")
    expired_before = metric_histogram(DECISION, decision="expired")

    waiting = await create(lifecycle, "write_file")
    await asyncio.sleep(0.2)
    decided = await lifecycle.decide(OPERATOR, waiting.approval_id, "allow_once", None)
    await create(lifecycle, "write_file", expires_in_s=0.1)
    await asyncio.sleep(0.3)
    assert await lifecycle.sweep(republish_after_s=600) >= 1

    count, total = metric_histogram(DECISION, decision="allow_once")
    assert decided.status == "granted"
    assert count == allowed_before[0] + 1
    assert total - allowed_before[1] >= 0.2
    assert metric_histogram(DECISION, decision="expired")[0] == expired_before[0] + 1


async def test_automated_answers_are_no_wait_and_are_not_recorded(
    lifecycle: Lifecycle, metric_histogram: Histogram
) -> None:
    before = metric_histogram(DECISION, decision="allow_once")[0]
    item = await create(lifecycle, "auto_ok")
    assert item.status == "granted"
    assert metric_histogram(DECISION, decision="allow_once")[0] == before
