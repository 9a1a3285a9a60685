"""Runs belong to the principal that started them: `tenant` and `owner` (its name) on
the run row, and an index for the per-tenant listing (newest first).

Runs made before this migration belong to tenant `default` with no owner (only the
tenant's operators and admins reach them).

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("tenant", sa.String(200), nullable=False, server_default="default")
    )
    op.add_column("runs", sa.Column("owner", sa.String(200)))
    op.create_index("ix_runs_tenant_created_at", "runs", ["tenant", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_created_at", table_name="runs")
    op.drop_column("runs", "owner")
    op.drop_column("runs", "tenant")
