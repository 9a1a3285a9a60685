"""Staged effects: the change set a request would apply (issue 21, item 1).

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("approvals", sa.Column("changes", JSONB))


def downgrade() -> None:
    op.drop_column("approvals", "changes")
