"""The tables that hold agents and the organisation policy (migration 0008), and the one
lock every change to them takes.

`agents`: one row per (tenant, agent id) (migration 0010), its definition (`spec`, an `AgentConfig` as JSON) with
`tenant`/`owner` copied out for filtering, a `version` for optimistic concurrency,
`source` (`settings`: still the seed; `api`: changed through the API, never seeded
over again) and `deleted` (a tombstone, so a deleted seed is not seeded back).
`policy_documents`: the guardrails and allow-list of one scope (`*` or a tenant).
`policy_generation`: one row whose counter grows with every change, so a replica never
puts an older snapshot in force over a newer one.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

metadata = MetaData()

agents_table = Table(
    "agents",
    metadata,
    Column("tenant", String(200), primary_key=True),
    Column("agent_id", String(200), primary_key=True),
    Column("owner", String(200)),
    Column("spec", JSONB, nullable=False),
    Column("version", Integer, nullable=False),
    Column("source", String(16), nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("changed_by", String(200), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)

policy_documents = Table(
    "policy_documents",
    metadata,
    Column("kind", String(32), primary_key=True),  # guardrails | allowlist
    Column("scope", String(200), primary_key=True),  # '*' or a tenant id
    Column("body", JSONB, nullable=False),
    Column("version", Integer, nullable=False),
    Column("source", String(16), nullable=False),
    Column("changed_by", String(200), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)

policy_generation = Table(
    "policy_generation",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("generation", BigInteger, nullable=False),
)

_LOCK = int.from_bytes(hashlib.sha256(b"tether-policy").digest()[:8], "big", signed=True)


async def lock(conn: AsyncConnection) -> None:
    """Serialise every change to agents and policy until `conn` commits: each audit
    record's `before` is what was really in force, and generations follow commits."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})


async def bump(conn: AsyncConnection) -> int:
    """The next generation (call under `lock`, in the change's transaction)."""
    found = await conn.scalar(
        update(policy_generation)
        .where(policy_generation.c.id == 1)
        .values(generation=policy_generation.c.generation + 1)
        .returning(policy_generation.c.generation)
    )
    return int(found or 0)
