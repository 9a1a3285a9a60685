"""The writes every change of a request makes, inside the caller's transaction holding the
row lock: the row, the operator event, the audit record and (for a change people are
told of) the notices; a decision is signed with the decision key as it is made.

A change is at most four statements (`apply`): the row's UPDATE with its run trail's lock
taken in the same statement, the trail's last link, the notices' endpoints, and one
statement writing everything else (issue 33: the decision is on the way to the tool);
those of a decision and of its spending are built once (`persistence.statements`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Update, update
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_approvals.decisions.decided import audit_data, facts_of
from tether_approvals.notices.outbox import Notices
from tether_approvals.persistence import statements
from tether_approvals.persistence.statements import Prepared, locked_change
from tether_approvals.persistence.store import event_params, view
from tether_approvals.persistence.tables import approvals
from tether_approvals.persistence.trail import head_params, record, run_trail
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
        return {
            "decision": decision,
            "decided_at": decided_at,
            "proof": self._proof(row, decision, decided_at, edited_args, response),
            "edited_args": edited_args,
            "response": response,
        }

    def _proof(
        self,
        row: Any,
        decision: str,
        decided_at: datetime,
        edited_args: dict[str, Any] | None = None,
        response: str | None = None,
    ) -> str:
        payload = payload_of(decision, row.tool, edited_args, response)
        facts = DecisionFacts(
            row.approval_id, row.run_id, row.action_digest, decision, decided_at, payload
        )
        return self.key.sign(facts)

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
        change = update(approvals).where(approvals.c.approval_id == approval_id)
        item = await self.apply(conn, change.values(**values), kind, event, notify=notify)
        assert item is not None, f"approval {approval_id} is not locked by its transaction"
        return item

    async def apply(
        self,
        conn: AsyncConnection,
        change: Update | Prepared,
        kind: EventKind,
        event: str,
        *,
        notify: bool,
        admit: Callable[[Any], bool] | None = None,
        seal: Callable[[Any], dict[str, Any]] | None = None,
    ) -> ApprovalView | None:
        """`change` (an UPDATE of one request, or one built once with this change's values:
        `persistence.statements`) and what goes with it, in its transaction: the operator
        event, the audit record with the trail's head, (`notify`) the notices, and what
        `seal` adds to the row once it is read back (a decision's proof). None, with
        nothing else written: `change` matched no row, or `admit` refused the row it
        changed (the caller refuses, rolling it back, or undoes it)."""
        if not isinstance(change, Prepared):
            change = Prepared(locked_change(change))
        row = (await conn.execute(change.statement, change.params)).first()
        if row is None or (admit is not None and not admit(row)):
            return None
        sealed = seal(row) if seal is not None else {}
        item = view(SimpleNamespace(**(dict(row._mapping) | sealed)))
        records = await _chained(conn, item, event, row.trail_ts)
        trail, head = records[-1]["run_id"], records[-1]["digest"]
        told = await self.notices.rows(conn, kind, item) if notify and self.notices else []
        now = datetime.now(UTC)
        written = statements.writes(
            event_params(kind, item, now),
            sealed,
            item.approval_id,
            records,
            head_params(trail, head, now),
            told,
        )
        await conn.execute(written.statement, written.params)
        if self.sink is not None:
            for record in records:
                await self.sink.write(record | {"ts": record["ts"].astimezone(UTC).isoformat()})
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
        event = "approval.auto_decided" if auto else "approval.decided"
        return await self.transition(
            conn,
            row.approval_id,
            "decided",
            event,
            # Nobody was asked about an automated answer, so nobody is told of it.
            notify=not auto,
            status=_status_of(decision),
            note=note,
            decided_by=by,
            **self._decision_values(row, decision, datetime.now(UTC), edited_args, response),
            **extra,
        )

    async def decide_plain(
        self,
        conn: AsyncConnection,
        approval_id: str,
        decision: Decision,
        by: str,
        note: str | None,
        admit: Callable[[Any], bool],
    ) -> ApprovalView | None:
        """The usual operator decision without the locked read before it (it is on the way
        from the operator to the tool): a request that is pending, not expired, one
        person's to decide (no quorum, group or escalation) and not a delete to remember
        is decided by one conditional UPDATE, which takes the row lock, and signed once
        its facts are read back. None: any other request, left to the caller's locked
        path (its refusals, expiry and votes), or one `admit` refused."""
        decided_at = datetime.now(UTC)
        change = Prepared(
            statements.DECIDED[decision in ("allow_run", "allow_chat")],
            {
                "p_id": approval_id,
                "p_at": decided_at,
                "p_status": _status_of(decision),
                "p_note": note,
                "p_by": by,
                "p_decision": decision,
            },
        )
        return await self.apply(
            conn,
            change,
            "decided",
            "approval.decided",
            notify=True,
            admit=admit,
            seal=lambda row: {"proof": self._proof(row, decision, decided_at)},
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


async def _chained(
    conn: AsyncConnection, item: ApprovalView, event: str, ts: datetime
) -> list[dict[str, Any]]:
    """The audit record of a change, linked to its run trail's last (read under the
    trail's lock, in a statement after the one that took it)."""
    trail = run_trail(item.run_id)
    start, prev = await audit.last_link(conn, trail)
    records, _ = audit.chain(trail, start, prev, [(event, audit_data(item))], ts)
    return records


def _status_of(decision: Decision | Answer) -> str:
    """The status a decision leaves its request in (why: `settle`)."""
    return "denied" if decision in ("deny", "respond") else "granted"
