"""Sub-agents: a run's parent and depth.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("parent_id", sa.String(64)))
    op.add_column("runs", sa.Column("depth", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_parent_id", "runs")
    op.drop_column("runs", "depth")
    op.drop_column("runs", "parent_id")
