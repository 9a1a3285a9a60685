"""Approval requests in PostgreSQL; a pending request past its expiry reads as expired."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, Text, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.errors import NotFoundError
from tether_common.messages.approvals import ApprovalStatus, ApprovalView, CreateApproval

metadata = MetaData()

approvals = Table(
    "approvals",
    metadata,
    Column("approval_id", String(40), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("tool", String(200), nullable=False),
    Column("args", JSONB, nullable=False),
    Column("danger", String(40), nullable=False),
    Column("reason", Text, nullable=False),
    Column("reach", String(20), nullable=False),
    Column("action_digest", String(64), nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("decision", String(20)),
    Column("note", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("decided_at", DateTime(timezone=True)),
)


def _view(row: Any) -> ApprovalView:
    return ApprovalView(
        approval_id=row.approval_id,
        run_id=row.run_id,
        step=row.step,
        tool=row.tool,
        args=row.args,
        danger=row.danger,
        reason=row.reason,
        reach=row.reach,
        action_digest=row.action_digest,
        status=row.status,
        decision=row.decision,
        note=row.note,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


class ApprovalStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def create(self, req: CreateApproval) -> ApprovalView:
        now = datetime.now(UTC)
        values = {
            "approval_id": f"apr_{uuid.uuid4().hex}",
            "run_id": req.run_id,
            "step": req.step,
            "tool": req.tool,
            "args": req.args,
            "danger": req.danger,
            "reason": req.reason,
            "reach": req.reach,
            "action_digest": req.action_digest,
            "status": "pending",
            "created_at": now,
            "expires_at": now + timedelta(seconds=req.expires_in_s),
        }
        async with self.engine.begin() as conn:
            row = (await conn.execute(approvals.insert().values(values).returning(approvals))).one()
        return _view(row)

    async def expire_due(self) -> int:
        """Mark pending requests past their expiry as expired (expiry counts as denied)."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(approvals)
                .where(approvals.c.status == "pending", approvals.c.expires_at <= datetime.now(UTC))
                .values(status="expired", decided_at=datetime.now(UTC))
            )
        return int(result.rowcount)

    async def list(self, status: ApprovalStatus | None, limit: int) -> list[ApprovalView]:
        await self.expire_due()
        query = select(approvals).order_by(approvals.c.created_at).limit(limit)
        if status is not None:
            query = query.where(approvals.c.status == status)
        async with self.engine.connect() as conn:
            return [_view(r) for r in await conn.execute(query)]

    async def get(self, approval_id: str) -> ApprovalView:
        await self.expire_due()
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(approvals).where(approvals.c.approval_id == approval_id))
            ).first()
        if row is None:
            raise NotFoundError(f"no approval '{approval_id}'")
        return _view(row)
