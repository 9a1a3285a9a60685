"""The writes every change of a request makes, inside the caller's transaction holding the
row lock: the row, the operator event, the audit record and (for a change people are
told of) the notices; a decision is signed with the decision key as it is made."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_approvals.decisions.decided import audit_data, facts_of
from tether_approvals.notices.outbox import Notices
from tether_approvals.persistence.store import add_event, view
from tether_approvals.persistence.tables import approvals
from tether_approvals.persistence.trail import record, run_trail
from tether_common import audit
from tether_common.decisions import DecisionFacts, DecisionKey, payload_of
from tether_common.messages.approvals import Answer, ApprovalView, Decision, EventKind

__all__ = ["Transitions"]


class Transitions:
    def __init__(
        self, *, key: DecisionKey, sink: audit.JsonlSink | None, notices: Notices | None
    ) -> None:
        self.key = key
        self.sink = sink
        self.notices = notices

    def verified(self, item: Any) -> bool:
        """Does this decided row carry this service's proof of its decision?"""
        facts = facts_of(item)
        return facts is not None and self.key.verify(facts, item.proof)

    def _decision_values(
        self,
        row: Any,
        decision: str,
        decided_at: datetime,
        edited_args: dict[str, Any] | None = None,
        response: str | None = None,
    ) -> dict[str, Any]:
        """The decision's columns, signed over what it says (an edit's arguments and a
        response's text included), in the transaction that makes it."""
        payload = payload_of(decision, row.tool, edited_args, response)
        facts = DecisionFacts(
            row.approval_id, row.run_id, row.action_digest, decision, decided_at, payload
        )
        return {
            "decision": decision,
            "decided_at": decided_at,
            "proof": self.key.sign(facts),
            "edited_args": edited_args,
            "response": response,
        }

    async def trail(
        self, conn: AsyncConnection, item: ApprovalView, event: str, data: dict[str, Any]
    ) -> None:
        """Write `event` to the request's run trail (what changes nothing on the row)."""
        await record(conn, run_trail(item.run_id), event, data, self.sink)

    async def transition(
        self,
        conn: AsyncConnection,
        approval_id: str,
        kind: EventKind,
        event: str,
        *,
        notify: bool = True,
        **values: Any,
    ) -> ApprovalView:
        stmt = update(approvals).where(approvals.c.approval_id == approval_id)
        row = (await conn.execute(stmt.values(**values).returning(approvals))).one()
        return await self.recorded(conn, row, kind, event, notify=notify)

    async def recorded(
        self, conn: AsyncConnection, row: Any, kind: EventKind, event: str, *, notify: bool
    ) -> ApprovalView:
        """What goes with every change of a row, in its transaction: the operator event,
        the audit record and (`notify`) the notices."""
        item = view(row)
        await add_event(conn, kind, item, datetime.now(UTC))
        await self.trail(conn, item, event, audit_data(item))
        if notify and self.notices is not None:
            await self.notices.record(conn, kind, item)
        return item

    async def settle(
        self,
        conn: AsyncConnection,
        row: Any,
        decision: Decision | Answer,
        by: str,
        note: str | None,
        *,
        auto: bool = False,
        edited_args: dict[str, Any] | None = None,
        response: str | None = None,
        **extra: Any,
    ) -> ApprovalView:
        """Decide a locked pending row (`row`: its columns, or its view). An `edit` is
        granted (the brain spends it for the edited call, gated again); a `respond` runs
        nothing, so it is `denied` like a deny: it can never be spent."""
        status = "denied" if decision in ("deny", "respond") else "granted"
        event = "approval.auto_decided" if auto else "approval.decided"
        return await self.transition(
            conn,
            row.approval_id,
            "decided",
            event,
            # Nobody was asked about an automated answer, so nobody is told of it.
            notify=not auto,
            status=status,
            note=note,
            decided_by=by,
            **self._decision_values(row, decision, datetime.now(UTC), edited_args, response),
            **extra,
        )

    async def escalate_if_due(self, conn: AsyncConnection, item: ApprovalView) -> ApprovalView:
        """Move a locked pending request to its second group once its time has come."""
        if item.escalate_at is None or item.escalated_at is not None:
            return item
        now = datetime.now(UTC)
        if item.escalate_at > now:
            return item
        return await self.transition(
            conn,
            item.approval_id,
            "escalated",
            "approval.escalated",
            group=item.escalate_to,
            escalated_at=now,
        )

    async def expire(self, conn: AsyncConnection, row: Any) -> ApprovalView:
        return await self.transition(
            conn,
            row.approval_id,
            "expired",
            "approval.expired",
            status="expired",
            decided_by="expiry",
            **self._decision_values(row, "expired", datetime.now(UTC)),
        )

    async def mark_consumed(self, conn: AsyncConnection, approval_id: str) -> ApprovalView:
        return await self.transition(
            conn,
            approval_id,
            "consumed",
            "approval.consumed",
            status="consumed",
            consumed_at=datetime.now(UTC),
        )

    async def withdraw(self, conn: AsyncConnection, row: Any, reason: str) -> ApprovalView:
        return await self.transition(
            conn,
            row.approval_id,
            "withdrawn",
            "approval.withdrawn",
            status="withdrawn",
            note=reason,
            decided_by="run stopped",
            decided_at=datetime.now(UTC),
        )
