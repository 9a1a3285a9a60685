"""Tool servers per tenant, their credentials sealed under the runner's key.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_servers",
        sa.Column("server_id", sa.Text, primary_key=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("transport", sa.String(10), nullable=False),
        sa.Column("url", sa.Text, nullable=True),
        sa.Column("command", sa.Text, nullable=True),
        sa.Column("args", JSONB, nullable=False, server_default="[]"),
        sa.Column("trusted", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("sealed", sa.LargeBinary, nullable=True),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index("ux_tool_servers_tenant_name", "tool_servers", ["tenant", "name"], unique=True)


def downgrade() -> None:
    op.drop_table("tool_servers")
