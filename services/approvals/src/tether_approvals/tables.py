"""The approvals service's tables (the audit trail's table lives in `tether_common.audit`)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

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
    Column("agent", String(200)),
    Column("owner", String(200)),
    Column("scope", String(40)),
    Column("effect", String(40)),
    Column("decided_by", String(200)),
    Column("consumed_at", DateTime(timezone=True)),
    # Outbox mark: set once the decision is on JetStream; the sweeper re-sends the rest.
    Column("published_at", DateTime(timezone=True)),
    # The decision's HMAC by this service (tether_common.decisions); the key is not here.
    Column("proof", String(80)),
)

# The operator event stream, in order; its id is the SSE event id (resumable).
approval_events = Table(
    "approval_events",
    metadata,
    Column("event_id", BigInteger, Identity(), primary_key=True),
    Column("approval_id", String(40), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("approval", JSONB, nullable=False),
    Column("ts", DateTime(timezone=True), nullable=False, index=True),
)

# Live operator event streams, refreshed by heartbeat, so presence is shared by replicas.
operator_sessions = Table(
    "operator_sessions",
    metadata,
    Column("session_id", String(40), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("agents", JSONB),
    Column("owners", JSONB),
    Column("seen_at", DateTime(timezone=True), nullable=False, index=True),
)

# The head digest of each audit trail this service writes (`approvals:<run_id>`,
# `_tokens`), so a trail cut after its last record is found by `audit.verify`.
audit_heads = Table(
    "audit_heads",
    metadata,
    Column("trail", String(200), primary_key=True),
    Column("head", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
