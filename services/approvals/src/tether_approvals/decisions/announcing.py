"""Putting a decision on JetStream (message id `<approval_id>:decided`, so a re-send is
deduplicated) and setting the row's outbox mark; a decided row without this service's
proof is never announced, only refused into the run's trail."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.decisions.decided import audit_data, decided_message
from tether_approvals.decisions.transitions import Transitions
from tether_approvals.persistence.statements import mark_published
from tether_common.messages.approvals import ApprovalDecided, ApprovalView
from tether_common.metrics import bus_errors

__all__ = ["Announcer", "Publisher"]

log = logging.getLogger(__name__)

Publisher = Callable[[ApprovalDecided], Awaitable[None]]


class Announcer:
    def __init__(self, engine: AsyncEngine, publish: Publisher, transitions: Transitions) -> None:
        self.engine = engine
        self.publish = publish
        self.transitions = transitions

    async def announce(self, item: ApprovalView) -> None:
        """Put a decision on JetStream and set the outbox mark; a failure is left to the
        sweeper, never raised to the operator whose decision is already durable. A
        decision without this service's proof is not announced (see `_refuse_forged`)."""
        if not self.transitions.verified(item):
            await self._refuse_forged(item)
            return
        try:
            await self.publish(decided_message(item))
        except Exception:
            log.warning("decision %s not published yet; the sweeper retries", item.approval_id)
            return
        async with self.engine.begin() as conn:
            await _mark_published(conn, item.approval_id, flush=False)

    async def _refuse_forged(self, item: ApprovalView) -> None:
        """A decided row this service did not sign: someone wrote the table directly.
        Never announced; logged, counted and written to the run's trail once (the outbox
        mark is set so the sweeper does not pick it up again)."""
        log.warning(
            "approval %s of run %s is %s without a valid proof: written outside the "
            "approvals service; not announced",
            item.approval_id,
            item.run_id,
            item.status,
        )
        bus_errors.add(1, {"service": "approvals", "code": "decision_unverified"})
        async with self.engine.begin() as conn:
            data = audit_data(item) | {"refused": "decision_unverified"}
            await self.transitions.trail(conn, item, "approval.forged_refused", data)
            await _mark_published(conn, item.approval_id)


async def _mark_published(conn: AsyncConnection, approval_id: str, *, flush: bool = True) -> None:
    """The outbox mark: the sweeper re-sends only decisions without it. `flush=False`:
    its commit does not wait for the disk (the decision's own commit did; a mark lost
    in a crash only means one more send, deduplicated), set in the same statement."""
    stmt, params = mark_published(approval_id, datetime.now(UTC), flush=flush)
    await conn.execute(stmt, params)
