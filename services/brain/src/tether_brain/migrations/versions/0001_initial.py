"""Runs and their append-only journal.

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
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(32), nullable=False, index=True),
        sa.Column("stop_reason", sa.Text),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("answer", sa.Text),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200)),
        sa.Column("max_steps", sa.Integer, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("journal_seq", sa.BigInteger, nullable=False),
        sa.Column("event_seq", sa.BigInteger, nullable=False),
        sa.Column("fence", sa.BigInteger, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
        sa.Column("usage_estimated", sa.Integer, nullable=False),
        sa.Column("options", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "run_journal",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("data", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )


def downgrade() -> None:
    op.drop_table("run_journal")
    op.drop_table("runs")
