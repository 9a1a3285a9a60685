"""Quotas: `quota_usage` holds the tokens and cost the metered runs of a tenant (and of
each agent it uses) reported in the current UTC hour and day, one row per counter and
window kind, reset in place when its window moves on. Run starts and concurrent runs
are read from `runs` (which a crash cannot make leak), with an index for a tenant's
recent starts. Tenants' quotas themselves are `policy_documents` of kind `quota`.

Revision ID: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quota_usage",
        sa.Column("tenant", sa.String(200), nullable=False),
        # '' the tenant's own counter; '<agent tenant>/<agent id>' one of its agents'.
        sa.Column("agent", sa.String(401), nullable=False),
        sa.Column("period", sa.String(8), nullable=False),  # hour | day
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "agent", "period"),
        sa.CheckConstraint("period IN ('hour', 'day')", name="ck_quota_usage_period"),
    )
    op.create_index("ix_runs_tenant_created", "runs", ["tenant", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_created", table_name="runs")
    op.drop_table("quota_usage")
