"""Agents and the organisation policy as resources: `agents`, `policy_documents` and the
one-row `policy_generation` counter (see `tether_brain.persistence.policy_tables`).

`agent_grants` (0005) stays until the first start after this migration has folded its
rows into `agents` (the store's seeding does that, then empties it).

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(200), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200)),
        sa.Column("spec", JSONB, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_agents_tenant", "agents", ["tenant"])
    op.create_table(
        "policy_documents",
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("scope", sa.String(200), primary_key=True),
        sa.Column("body", JSONB, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "policy_generation",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("generation", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO policy_generation (id, generation) VALUES (1, 0)")


def downgrade() -> None:
    op.drop_table("policy_generation")
    op.drop_table("policy_documents")
    op.drop_index("ix_agents_tenant", table_name="agents")
    op.drop_table("agents")
