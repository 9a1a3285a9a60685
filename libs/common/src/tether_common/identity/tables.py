"""The identity tables, owned by tether_common and migrated by every service with a
database (`tether_common.identity.migrate`, version table `alembic_identity`)."""

from __future__ import annotations

from sqlalchemy import Column, DateTime, MetaData, String, Table
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

# One row per token. A principal is (tenant, name); it may hold several tokens (rotation).
# Only the sha256 of the token is kept: tokens are 32 random bytes, so a fast hash is
# enough (nothing to brute-force), and the lookup is one indexed equality.
identity_tokens = Table(
    "identity_tokens",
    metadata,
    Column("token_id", String(40), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("tenant", String(200), nullable=False, index=True),
    Column("role", String(20), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("agents", JSONB),
    Column("owners", JSONB),
    Column("providers", JSONB),
    Column("models", JSONB),
    Column("modes", JSONB),
    # Approver groups (teams) for quorum rules (migration 0002).
    Column("groups", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("created_by", String(200)),
    Column("expires_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
)

# The head digest of the `_tokens` audit trail, written in the same transaction as each
# record, so a trail cut after its last record is found by `audit.verify`.
identity_heads = Table(
    "identity_heads",
    metadata,
    Column("trail", String(200), primary_key=True),
    Column("head", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
