"""Staged effects: change sets awaiting an approval, and the bytes they write.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "staged_effects",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("request", sa.String(64), nullable=False),
        sa.Column("changes", JSONB, nullable=False),
        sa.Column(
            "staged_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index("ix_staged_effects_staged_at", "staged_effects", ["staged_at"])
    op.create_table(
        "staged_contents",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("path", sa.Text, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.ForeignKeyConstraint(
            ["key", "digest"],
            ["staged_effects.key", "staged_effects.digest"],
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("staged_contents")
    op.drop_table("staged_effects")
