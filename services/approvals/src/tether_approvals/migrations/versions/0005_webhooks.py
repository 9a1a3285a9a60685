"""Operators are told: webhook endpoints, the notice outbox (webhook deliveries and NATS
notices, written in the transaction of the change they announce), and each request's
tenant (which endpoints hear of it).

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "approvals",
        sa.Column("tenant", sa.String(200), nullable=False, server_default="default"),
    )
    op.create_table(
        "webhook_endpoints",
        sa.Column("endpoint_id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False, index=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("events", JSONB, nullable=False),
        sa.Column("agents", JSONB),
        sa.Column("owners", JSONB),
        sa.Column("description", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
    )
    op.create_table(
        "notice_outbox",
        sa.Column("delivery_id", sa.String(40), primary_key=True),
        sa.Column("notice_id", sa.String(40), nullable=False),
        sa.Column(
            "endpoint_id",
            sa.String(40),
            sa.ForeignKey("webhook_endpoints.endpoint_id", ondelete="CASCADE"),
            index=True,
        ),
        sa.Column("sink", sa.String(10), nullable=False),
        sa.Column("subject", sa.String(200)),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("approval_id", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("give_up_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text),
    )
    op.create_index(
        "notice_outbox_due",
        "notice_outbox",
        ["next_attempt_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index("notice_outbox_status", "notice_outbox", ["status", "tenant"])


def downgrade() -> None:
    op.drop_table("notice_outbox")
    op.drop_table("webhook_endpoints")
    op.drop_column("approvals", "tenant")
