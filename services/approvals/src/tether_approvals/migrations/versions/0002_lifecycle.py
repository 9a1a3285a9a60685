"""Lifecycle columns, the operator event log, tokens, operator sessions, the audit trail.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from tether_common.audit import create_table

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _add_lifecycle_columns()
    _create_operator_tables()
    create_table(op.get_bind())


def _add_lifecycle_columns() -> None:
    for name, type_ in (
        ("agent", sa.String(200)),
        ("owner", sa.String(200)),
        ("scope", sa.String(40)),
        ("effect", sa.String(40)),
        ("decided_by", sa.String(200)),
        ("consumed_at", sa.DateTime(timezone=True)),
        ("published_at", sa.DateTime(timezone=True)),
    ):
        op.add_column("approvals", sa.Column(name, type_))


def _create_operator_tables() -> None:
    op.create_table(
        "approval_events",
        sa.Column("event_id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("approval_id", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("approval", JSONB, nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False, index=True),
    )
    op.create_table(
        "tokens",
        sa.Column("token_id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("agents", JSONB),
        sa.Column("owners", JSONB),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "operator_sessions",
        sa.Column("session_id", sa.String(40), primary_key=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("agents", JSONB),
        sa.Column("owners", JSONB),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False, index=True),
    )
    op.create_table(
        "audit_heads",
        sa.Column("trail", sa.String(200), primary_key=True),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("audit_heads")
    op.drop_table("operator_sessions")
    op.drop_table("tokens")
    op.drop_table("approval_events")
    for name in ("agent", "owner", "scope", "effect", "decided_by", "consumed_at", "published_at"):
        op.drop_column("approvals", name)
