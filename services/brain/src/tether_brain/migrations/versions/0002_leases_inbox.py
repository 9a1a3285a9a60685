"""Leases with fencing, stop requests, limits, loop counters, and the run inbox.

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
    op.add_column("runs", sa.Column("lease_owner", sa.String(128)))
    op.add_column("runs", sa.Column("lease_expires_at", sa.DateTime(timezone=True)))
    op.add_column("runs", sa.Column("takeovers", sa.Integer, nullable=False, server_default="0"))
    op.add_column(
        "runs", sa.Column("last_takeover_step", sa.Integer, nullable=False, server_default="-1")
    )
    op.add_column(
        "runs", sa.Column("stop_requested", sa.Boolean, nullable=False, server_default="false")
    )
    op.add_column("runs", sa.Column("limits", JSONB, nullable=False, server_default="{}"))
    op.add_column("runs", sa.Column("counters", JSONB, nullable=False, server_default="{}"))
    op.add_column("runs", sa.Column("active_seconds", sa.Float, nullable=False, server_default="0"))
    op.create_index(
        "ix_runs_live_lease",
        "runs",
        ["lease_expires_at"],
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )
    op.create_table(
        "run_inbox",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, index=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("delivered", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_inbox")
    op.drop_index("ix_runs_live_lease", "runs")
    for column in (
        "active_seconds",
        "counters",
        "limits",
        "stop_requested",
        "last_takeover_step",
        "takeovers",
        "lease_expires_at",
        "lease_owner",
    ):
        op.drop_column("runs", column)
