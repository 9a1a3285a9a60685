"""Schedules: `schedules` holds each tenant's schedules (when: a cron expression in a zone,
or an interval from an anchor; what: agent, prompt, budgets; as whom: the principal that
last set it going; `next_fire_at`, the tick the brains wait for). `schedule_firings`
holds one row per run a schedule started, keyed by (schedule, tick): written in the
transaction that claims the tick and stores the run, so no tick starts two runs.

Revision ID: 0017
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("schedule_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200)),
        sa.Column("cron", sa.String(200)),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("interval_s", sa.Integer),
        sa.Column("anchor", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent", sa.String(200)),
        sa.Column("provider", sa.String(64)),
        sa.Column("model", sa.String(200)),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("budgets", JSONB, nullable=False),
        sa.Column("overlap", sa.String(8), nullable=False),
        sa.Column("catch_up", sa.String(8), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("paused_reason", sa.Text),
        sa.Column("run_as", sa.String(200), nullable=False),
        sa.Column("run_as_token", sa.String(64)),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pending_tick", sa.DateTime(timezone=True)),
        sa.Column("last_tick_at", sa.DateTime(timezone=True)),
        sa.Column("last_run_id", sa.String(64)),
        sa.Column("fired", sa.Integer, nullable=False, server_default="0"),
        sa.Column("skipped", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("changed_by", sa.String(200), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_schedules_tenant", "schedules", ["tenant"])
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_fire_at"],
        postgresql_where=sa.text("enabled"),
    )
    op.create_table(
        "schedule_firings",
        sa.Column("schedule_id", sa.String(64), nullable=False),
        sa.Column("tick_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("covers", sa.Integer, nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("schedule_id", "tick_at"),
    )


def downgrade() -> None:
    op.drop_table("schedule_firings")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_index("ix_schedules_tenant", table_name="schedules")
    op.drop_table("schedules")
