"""Two keys: a request's quorum (people needed, the group that may decide, escalation),
its requester, and the votes given so far.

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("approvals", sa.Column("requested_by", sa.String(200)))
    op.add_column("approvals", sa.Column("needed", sa.Integer, nullable=False, server_default="1"))
    op.add_column("approvals", sa.Column("group", sa.String(200)))
    op.add_column("approvals", sa.Column("votes", JSONB, nullable=False, server_default="[]"))
    op.add_column("approvals", sa.Column("escalate_to", sa.String(200)))
    op.add_column("approvals", sa.Column("escalate_at", sa.DateTime(timezone=True)))
    op.add_column("approvals", sa.Column("escalated_at", sa.DateTime(timezone=True)))
    op.create_index(
        "approvals_escalation_due",
        "approvals",
        ["escalate_at"],
        postgresql_where=sa.text("status = 'pending' AND escalated_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("approvals_escalation_due", table_name="approvals")
    for name in (
        "escalated_at",
        "escalate_at",
        "escalate_to",
        "votes",
        "group",
        "needed",
        "requested_by",
    ):
        op.drop_column("approvals", name)
