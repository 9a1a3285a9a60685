"""Keyed effects (exactly-once non-idempotent calls) and read-before-write revisions.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_effects",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("run_id", sa.Text, nullable=False, index=True),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("replica", sa.Text, nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", JSONB, nullable=True),
    )
    op.create_index("ix_tool_effects_started_at", "tool_effects", ["started_at"])
    op.create_table(
        "file_revisions",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("path", sa.Text, primary_key=True),
        sa.Column("revision", sa.String(80), nullable=False),
        sa.Column(
            "seen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index("ix_file_revisions_seen_at", "file_revisions", ["seen_at"])


def downgrade() -> None:
    op.drop_table("file_revisions")
    op.drop_table("tool_effects")
