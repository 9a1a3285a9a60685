"""Principals' tokens (hashed), their limits and expiry; the `_tokens` trail's head; the
shared audit table, in case this is the first migration to run on the database.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from tether_common import audit

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "identity_tokens",
        sa.Column("token_id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False, index=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("agents", JSONB),
        sa.Column("owners", JSONB),
        sa.Column("providers", JSONB),
        sa.Column("models", JSONB),
        sa.Column("modes", JSONB),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(200)),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "identity_heads",
        sa.Column("trail", sa.String(200), primary_key=True),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    audit.create_table(op.get_bind())


def downgrade() -> None:
    op.drop_table("identity_heads")
    op.drop_table("identity_tokens")
