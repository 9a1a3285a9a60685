"""Reading approval requests and the operator event log, always within a caller's scope."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.persistence.tables import approval_events, approvals
from tether_common.errors import NotFoundError
from tether_common.identity import Action
from tether_common.messages.approvals import (
    ApprovalEvent,
    ApprovalView,
    EventKind,
    ListApprovals,
)

# View fields kept under another column name (`approvals.approvals` would read badly).
_COLUMN_OF = {"approvals": "votes"}


def view(row: Any) -> ApprovalView:
    fields = ApprovalView.model_fields.keys() - {"version"}
    return ApprovalView.model_validate(
        {name: getattr(row, _COLUMN_OF.get(name, name)) for name in fields}
    )


# The operator event of a change, built once; its parameters are `event_params`' (a
# change writes it inside its one writes statement).
EVENT_INSERT = approval_events.insert().values(
    {
        c: bindparam(f"e_{c}", type_=approval_events.c[c].type)
        for c in ("approval_id", "kind", "approval", "ts")
    }
)


def event_params(kind: EventKind, item: ApprovalView, ts: datetime) -> dict[str, Any]:
    return {
        "e_approval_id": item.approval_id,
        "e_kind": kind,
        "e_approval": item.model_dump(mode="json"),
        "e_ts": ts,
    }


async def add_event(
    conn: AsyncConnection, kind: EventKind, item: ApprovalView, ts: datetime
) -> None:
    """Record an event in the transaction that made the change, so the log never lies."""
    await conn.execute(EVENT_INSERT, event_params(kind, item, ts))


def in_scope(
    who: Principal | None,
    tenant: str,
    agent: str | None,
    owner: str | None,
    action: Action = "approvals.read",
) -> bool:
    """Whether `who` reaches an approval: its tenant (or, for an owner, its own agents'
    requests) by the permission table, and within the token's team scope. None is the
    service itself."""
    if who is None:
        return True
    return who.sees(action, tenant, owner, agent_owner=owner) and who.covers(agent, owner)


async def locked_row(conn: AsyncConnection, approval_id: str, who: Principal | None) -> Any:
    """The row, locked for a decision; a request out of `who`'s reach does not exist."""
    row = (
        await conn.execute(
            select(approvals).where(approvals.c.approval_id == approval_id).with_for_update()
        )
    ).first()
    if row is None or not in_scope(who, row.tenant, row.agent, row.owner, "approvals.decide"):
        raise NotFoundError(f"no approval '{approval_id}'")
    return row


class ApprovalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get(self, approval_id: str, who: Principal | None) -> ApprovalView:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(approvals).where(approvals.c.approval_id == approval_id))
            ).first()
        if row is None or not in_scope(who, row.tenant, row.agent, row.owner):
            raise NotFoundError(f"no approval '{approval_id}'")
        return view(row)

    async def find(self, query: ListApprovals, who: Principal | None) -> list[ApprovalView]:
        stmt = select(approvals).order_by(approvals.c.created_at)
        for column, wanted in (
            (approvals.c.status, query.status),
            (approvals.c.run_id, query.run_id),
            (approvals.c.agent, query.agent),
            (approvals.c.owner, query.owner),
        ):
            if wanted is not None:
                stmt = stmt.where(column == wanted)
        if query.id_prefix is not None:  # autoescape: the `_` of `apr_` is no LIKE wildcard
            stmt = stmt.where(approvals.c.approval_id.startswith(query.id_prefix, autoescape=True))
        if who is not None:
            reach = who.reach("approvals.read")
            if reach.tenant is not None:
                stmt = stmt.where(approvals.c.tenant == reach.tenant)
            if reach.owner is not None:
                stmt = stmt.where(approvals.c.owner == reach.owner)
        if who is not None and who.agents is not None:
            stmt = stmt.where(approvals.c.agent.in_(sorted(who.agents)))
        if who is not None and who.owners is not None:
            stmt = stmt.where(approvals.c.owner.in_(sorted(who.owners)))
        async with self.engine.connect() as conn:
            rows = await conn.execute(stmt.limit(query.limit))
            return [view(r) for r in rows]

    async def last_event_id(self) -> int:
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(func.max(approval_events.c.event_id)))).scalar()
        return int(found or 0)

    async def events_after(
        self, after: int, who: Principal, limit: int = 200
    ) -> tuple[list[ApprovalEvent], int]:
        """Events past `after` that `who` may see, in order, and the last id read (the
        SSE replay and tail go on from there even when nothing was in scope)."""
        stmt = (
            select(approval_events)
            .where(approval_events.c.event_id > after)
            .order_by(approval_events.c.event_id)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(stmt))
        events = [
            ApprovalEvent(event_id=r.event_id, kind=r.kind, approval=r.approval, ts=r.ts)
            for r in rows
        ]
        last = rows[-1].event_id if rows else after
        seen = [
            e
            for e in events
            if in_scope(who, e.approval.tenant, e.approval.agent, e.approval.owner)
        ]
        return seen, last

    async def prune_events(self, retention_s: float) -> None:
        """Drop operator events older than the retention (resuming past it starts fresh)."""
        cutoff = datetime.now(UTC) - timedelta(seconds=retention_s)
        async with self.engine.begin() as conn:
            await conn.execute(delete(approval_events).where(approval_events.c.ts < cutoff))
