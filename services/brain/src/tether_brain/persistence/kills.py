"""The `kills` table (migration 0012) and its SQL: the kills in force, setting one (or
finding the one already in force on that target) and lifting it, the record of every
kill, and the parked runs a set of kills covers (the SQL twin of `Kill.covers`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    MetaData,
    String,
    Table,
    Text,
    and_,
    false,
    func,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.tables import runs
from tether_brain.state.kills import Kill
from tether_brain.state.run import DEFAULT_AGENT
from tether_common.messages.kills import KillScope, KillView
from tether_common.messages.runs import PARKED_STATUSES

metadata = MetaData()

kills = Table(
    "kills",
    metadata,
    Column("kill_id", BigInteger, primary_key=True),
    Column("scope", String(16), nullable=False),
    Column("tenant", String(200)),
    Column("agent", String(200)),
    Column("reason", Text),
    Column("killed_by", String(200), nullable=False),
    Column("killed_at", DateTime(timezone=True), nullable=False),
    Column("lifted_by", String(200)),
    Column("lifted_at", DateTime(timezone=True)),
    Column("lift_reason", Text),
)

# Setting and lifting kills one at a time: "already in force?" is then answered by what
# is really in force (the partial unique index is the last guard).
_LOCK = int.from_bytes(hashlib.sha256(b"tether-kills").digest()[:8], "big", signed=True)
Target = tuple[KillScope, str | None, str | None]  # scope, tenant, agent


def _on(target: Target) -> ColumnElement[bool]:
    """The kill in force on exactly this target."""
    scope, tenant, agent = target
    return and_(
        kills.c.scope == scope,
        kills.c.tenant.is_(None) if tenant is None else kills.c.tenant == tenant,
        kills.c.agent.is_(None) if agent is None else kills.c.agent == agent,
        kills.c.lifted_at.is_(None),
    )


def view_of(row: Any) -> KillView:
    return KillView.model_validate(row, from_attributes=True)


def kill_of(row: Any) -> Kill:
    return Kill(
        kill_id=row.kill_id,
        scope=row.scope,
        tenant=row.tenant,
        agent=row.agent,
        reason=row.reason,
        killed_by=row.killed_by,
        killed_at=row.killed_at,
    )


class KillStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def in_force(self) -> list[Kill]:
        """Every kill not lifted, oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(kills).where(kills.c.lifted_at.is_(None)).order_by(kills.c.kill_id)
            )
            return [kill_of(r) for r in rows]

    async def listing(self, *, lifted: bool, limit: int, tenant: str | None) -> list[KillView]:
        """The kills in force (and, with `lifted`, the lifted ones too), newest first;
        with `tenant`, only those about it (its own, its agents', and `all`)."""
        query = select(kills).order_by(kills.c.kill_id.desc()).limit(limit)
        if not lifted:
            query = query.where(kills.c.lifted_at.is_(None))
        if tenant is not None:
            query = query.where(or_(kills.c.scope == "all", kills.c.tenant == tenant))
        async with self.engine.connect() as conn:
            return [view_of(r) for r in await conn.execute(query)]

    async def set(
        self, conn: AsyncConnection, target: Target, reason: str | None, by: str
    ) -> tuple[KillView, bool]:
        """The kill in force on `target`: the one already there (False), or a new one
        (True), in `conn`'s transaction, which holds the kills' lock until it commits."""
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
        found = (await conn.execute(select(kills).where(_on(target)))).first()
        if found is not None:
            return view_of(found), False
        scope, tenant, agent = target
        row = (
            await conn.execute(
                kills.insert()
                .values(
                    scope=scope,
                    tenant=tenant,
                    agent=agent,
                    reason=reason,
                    killed_by=by,
                    killed_at=datetime.now(UTC),
                )
                .returning(*kills.c)
            )
        ).one()
        return view_of(row), True

    async def lift(
        self, conn: AsyncConnection, target: Target, reason: str | None, by: str
    ) -> tuple[KillView, KillView] | None:
        """Lift the kill in force on `target` (in `conn`'s transaction, under the kills'
        lock): the kill before and after, or None if none is in force there."""
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
        before = (await conn.execute(select(kills).where(_on(target)))).first()
        if before is None:
            return None
        after = (
            await conn.execute(
                update(kills)
                .where(kills.c.kill_id == before.kill_id)
                .values(lifted_by=by, lifted_at=datetime.now(UTC), lift_reason=reason)
                .returning(*kills.c)
            )
        ).one()
        return view_of(before), view_of(after)

    async def parked_in_scope(self, covering: Sequence[Kill], limit: int) -> list[str]:
        """The parked runs (awaiting an approval or helpers: no task holds them) that any
        of `covering` covers, as `Kill.covers` decides for a run in memory."""
        if not covering:
            return []
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(runs.c.run_id)
                .where(runs.c.status.in_(sorted(PARKED_STATUSES)), in_scope(covering))
                .limit(limit)
            )
            return [r.run_id for r in rows]


def in_scope(covering: Sequence[Kill]) -> ColumnElement[bool]:
    """A run row that one of `covering` covers: the SQL of `Kill.covers` and
    `RunScope.of` (a test holds the two to the same answers)."""
    agent_tenant = func.coalesce(runs.c.options["agent_tenant"].astext, runs.c.tenant)
    agent = func.coalesce(runs.c.options["agent"].astext, DEFAULT_AGENT)
    conditions: list[ColumnElement[bool]] = [false()]
    for kill in covering:
        match kill.scope:
            case "all":
                conditions.append(true())
            case "tenant":
                conditions.append(runs.c.tenant == kill.tenant)
            case "agent":
                conditions.append(and_(agent_tenant == kill.tenant, agent == kill.agent))
    return or_(*conditions)
