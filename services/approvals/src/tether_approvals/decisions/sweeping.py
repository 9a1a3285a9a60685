"""The sweep, on a timer on every replica and one replica at a time: escalate what is due,
expire what is due (expiry counts as denied even when nobody is watching) and re-send
the decisions a crash or a NATS outage kept off JetStream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.decisions.announcing import Announcer
from tether_approvals.decisions.decided import observe_decision
from tether_approvals.decisions.transitions import Transitions
from tether_approvals.persistence.store import view
from tether_approvals.persistence.tables import approvals
from tether_common.messages.approvals import ApprovalView

__all__ = ["Sweeper"]

# Held for one sweep transaction, so replicas never expire (and announce) the same request.
_SWEEP_KEY = {"k": 0x7E7A_5EE9}


class Sweeper:
    def __init__(self, engine: AsyncEngine, transitions: Transitions, announcer: Announcer) -> None:
        self.engine = engine
        self.transitions = transitions
        self.announcer = announcer

    async def sweep(self, republish_after_s: float) -> int:
        """Expire what is due (one replica at a time) and re-send unsent decisions."""
        async with self.engine.begin() as conn:
            locked = await conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), _SWEEP_KEY)
            if not locked.scalar():
                return 0
            await self._escalate_due(conn)
            expired = await self._expire_due(conn)
            items = expired + await self._unsent(conn, republish_after_s)
        for item in expired:
            observe_decision(item)
        for item in items:
            await self.announcer.announce(item)
        return len(items)

    async def _escalate_due(self, conn: AsyncConnection) -> None:
        """Move unanswered requests to their second group (and tell its people)."""
        now = datetime.now(UTC)
        due = await conn.execute(
            approvals.select()
            .where(
                approvals.c.status == "pending",
                approvals.c.escalated_at.is_(None),
                approvals.c.escalate_at <= now,
                approvals.c.expires_at > now,
            )
            .with_for_update(skip_locked=True)
            .limit(200)
        )
        for row in list(due):
            await self.transitions.escalate_if_due(conn, view(row))

    async def _expire_due(self, conn: AsyncConnection) -> list[ApprovalView]:
        due = await conn.execute(
            approvals.select()
            .where(approvals.c.status == "pending", approvals.c.expires_at <= datetime.now(UTC))
            .with_for_update(skip_locked=True)
            .limit(200)
        )
        return [await self.transitions.expire(conn, row) for row in list(due)]

    async def _unsent(self, conn: AsyncConnection, older_than_s: float) -> list[ApprovalView]:
        """Decisions a crash (or a NATS outage) kept off JetStream; re-sent deduplicated."""
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        rows = await conn.execute(
            approvals.select()
            .where(
                approvals.c.decision.is_not(None),
                approvals.c.published_at.is_(None),
                approvals.c.decided_at <= cutoff,
            )
            .limit(200)
        )
        return [view(row) for row in rows]
