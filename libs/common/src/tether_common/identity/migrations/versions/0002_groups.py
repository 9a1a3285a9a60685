"""Approver groups on tokens: a quorum may require its people to be of one group.

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
    op.add_column("identity_tokens", sa.Column("groups", JSONB))


def downgrade() -> None:
    op.drop_column("identity_tokens", "groups")
