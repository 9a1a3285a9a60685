"""Quotas' SQL: a tenant's quota (its `policy_documents` row of kind `quota`), the lock
every gated start of a tenant takes, and what a tenant and one of its agents have used
(live and recent runs from `runs`, tokens and cost from `quota_usage`, migration 0013;
a step adds to those counters in its own commit, `commits.COMMIT_STEP`)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    Float,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    and_,
    func,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_brain.persistence.policy_tables import policy_documents
from tether_brain.persistence.tables import runs
from tether_brain.state.quotas import MINUTE, TENANT_COUNTER, Period, Spent, Use
from tether_brain.state.run import DEFAULT_AGENT
from tether_common.messages.quotas import Quota
from tether_common.messages.runs import TERMINAL_STATUSES

log = logging.getLogger(__name__)

metadata = MetaData()

quota_usage = Table(
    "quota_usage",
    metadata,
    Column("tenant", String(200), nullable=False),
    Column("agent", String(401), nullable=False),
    Column("period", String(8), nullable=False),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("cost", Float, nullable=False),
    PrimaryKeyConstraint("tenant", "agent", "period"),
)

QUOTA_KIND = "quota"  # the `policy_documents.kind` of a tenant's quota
_LOCK_SALT = b"tether-quota:"
LIVE = sorted({"queued", "running", "awaiting_approval", "awaiting_agents"} - TERMINAL_STATUSES)


async def tenant_quota(conn: AsyncConnection, tenant: str) -> Quota:
    """The tenant's quota as stored (none stored, or one this brain cannot read: none)."""
    body = await conn.scalar(
        select(policy_documents.c.body).where(
            and_(policy_documents.c.kind == QUOTA_KIND, policy_documents.c.scope == tenant)
        )
    )
    if body is None:
        return Quota()
    try:
        return Quota.model_validate(body)
    except ValidationError as exc:  # written by the API, so only by a newer brain
        log.error(
            "the quota of tenant %s is stored in a shape this brain cannot read: %s", tenant, exc
        )
        return Quota()


async def lock_tenant(conn: AsyncConnection, tenant: str) -> datetime:
    """Hold the tenant's quota lock until `conn` commits: its gated starts, on every
    replica, then count and insert one at a time. The database's clock after the lock."""
    key = int.from_bytes(
        hashlib.sha256(_LOCK_SALT + tenant.encode()).digest()[:8], "big", signed=True
    )
    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
    return await clock(conn)


async def clock(conn: AsyncConnection) -> datetime:
    """The database's clock now: every replica's windows are counted on it."""
    now: datetime = await conn.scalar(text("SELECT clock_timestamp()"))
    return now


def _of_agent(agent_tenant: str, agent: str) -> ColumnElement[bool]:
    """A run of this agent (the SQL of `RunScope.of`: a row stored before agents had
    tenant keys is its own tenant's agent)."""
    return and_(
        func.coalesce(runs.c.options["agent_tenant"].astext, runs.c.tenant) == agent_tenant,
        func.coalesce(runs.c.options["agent"].astext, DEFAULT_AGENT) == agent,
    )


async def use_of(
    conn: AsyncConnection,
    tenant: str,
    agent: tuple[str, str, str],
    now: datetime,
    *,
    starts: bool,
) -> tuple[Use, Use]:
    """What `tenant` and its `agent` (agent tenant, id, counter key) have used at `now`;
    the starts of the last minute only when `starts` (a `runs_per_minute` applies).
    Only runs clients start count toward runs: a helper runs in its parent's slot."""
    mine = _of_agent(agent[0], agent[1])
    top = and_(runs.c.tenant == tenant, runs.c.parent_id.is_(None))
    live = (
        await conn.execute(
            select(func.count(), func.count().filter(mine)).where(top, runs.c.status.in_(LIVE))
        )
    ).one()
    recent: Sequence[Any] = []
    if starts:
        recent = (
            await conn.execute(
                select(runs.c.created_at, mine.label("mine"))
                .where(top, runs.c.created_at > now - MINUTE)
                .order_by(runs.c.created_at)
            )
        ).all()
    counters = await conn.execute(
        select(quota_usage).where(
            quota_usage.c.tenant == tenant, quota_usage.c.agent.in_([TENANT_COUNTER, agent[2]])
        )
    )
    spent: dict[str, dict[Period, Spent]] = {TENANT_COUNTER: {}, agent[2]: {}}
    for row in counters:
        period: Period = "hour" if row.period == "hour" else "day"
        spent[row.agent][period] = Spent(row.window_start, int(row.tokens), float(row.cost))
    tenant_use = Use(now, int(live[0]), [r.created_at for r in recent], spent[TENANT_COUNTER])
    agent_use = Use(now, int(live[1]), [r.created_at for r in recent if r.mine], spent[agent[2]])
    return tenant_use, agent_use
