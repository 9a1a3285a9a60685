"""Spending a granted approval once, for exactly the action it was sealed to, just before
the brain runs it; anything else is refused with an outcome the brain reads (and the
refusal goes to the run's trail). A granted row whose proof does not verify is never
spent."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.decisions.announcing import Announcer
from tether_approvals.decisions.decided import audit_data, observe_decision
from tether_approvals.decisions.transitions import Transitions
from tether_approvals.persistence.statements import SPENT, Prepared
from tether_approvals.persistence.store import locked_row, view
from tether_approvals.persistence.tables import approvals
from tether_common.messages.approvals import (
    ApprovalView,
    ConsumeApproval,
    ConsumeOutcome,
    ConsumeResult,
)
from tether_common.metrics import bus_errors

__all__ = ["UNVERIFIED", "Spending"]

log = logging.getLogger(__name__)

_REFUSED: dict[str, ConsumeOutcome] = {
    "pending": "approval_pending",
    "denied": "approval_denied",
    "expired": "approval_expired",
    "consumed": "already_consumed",
    "withdrawn": "approval_withdrawn",
}
# Outcome of spending a granted row whose proof does not verify (written outside).
UNVERIFIED: ConsumeOutcome = "approval_unverified"


class Spending:
    def __init__(self, engine: AsyncEngine, transitions: Transitions, announcer: Announcer) -> None:
        self.engine = engine
        self.transitions = transitions
        self.announcer = announcer

    async def consume(self, req: ConsumeApproval) -> ConsumeResult:
        """Spend a granted approval once, for exactly the action it was sealed to."""
        expired: ApprovalView | None = None
        async with self.engine.begin() as conn:
            spent = await self._spend(conn, req)
            if spent is not None:
                return ConsumeResult(
                    approval_id=req.approval_id, outcome="consumed", approval=spent
                )
            row = await locked_row(conn, req.approval_id, None)
            outcome = self._consume_outcome(row, req.action_digest)
            if outcome == "consumed" and not self.transitions.verified(row):
                outcome = UNVERIFIED
                bus_errors.add(1, {"service": "approvals", "code": "decision_unverified"})
                log.warning(
                    "refused to spend approval %s: its proof does not verify", row.approval_id
                )
            if outcome == "consumed":
                item = await self.transitions.mark_consumed(conn, req.approval_id)
            elif outcome == "approval_expired" and row.status == "pending":
                item = expired = await self.transitions.expire(conn, row)
            else:
                item = view(row)
                data = audit_data(item) | {"refused": outcome}
                await self.transitions.trail(conn, item, "approval.consume_refused", data)
        if expired is not None:
            observe_decision(expired)
            await self.announcer.announce(expired)
        return ConsumeResult(approval_id=req.approval_id, outcome=outcome, approval=item)

    async def _spend(self, conn: AsyncConnection, req: ConsumeApproval) -> ApprovalView | None:
        """The usual spend in one statement instead of a locked read and an update (it is on
        the way from a decision to its tool): a granted row sealed to this very action
        becomes consumed, the update taking the row lock. Its proof is then checked on
        what the update returns; one that does not verify is put back, under the same
        lock, for `consume` to refuse as before. None: not spent here."""
        spent_at = datetime.now(UTC)
        params = {"p_id": req.approval_id, "p_digest": req.action_digest, "p_at": spent_at}
        item = await self.transitions.apply(
            conn,
            Prepared(SPENT, params),
            "consumed",
            "approval.consumed",
            notify=True,
            admit=self.transitions.verified,
        )
        if item is None:  # put back a row changed above whose proof does not verify
            back = update(approvals).where(
                approvals.c.approval_id == req.approval_id,
                approvals.c.status == "consumed",
                approvals.c.consumed_at == spent_at,
            )
            await conn.execute(back.values(status="granted", consumed_at=None))
        return item

    @staticmethod
    def _consume_outcome(row: Any, digest: str) -> ConsumeOutcome:
        if row.status == "pending" and row.expires_at <= datetime.now(UTC):
            return "approval_expired"
        if row.status != "granted":
            return _REFUSED[row.status]
        return "consumed" if digest == row.action_digest else "approval_stale"
