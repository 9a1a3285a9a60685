"""The decision's proof: an HMAC by the approvals service that the brain verifies.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("approvals", sa.Column("proof", sa.String(80)))


def downgrade() -> None:
    op.drop_column("approvals", "proof")
