"""The audit trail: `audit_records` (shared with the approvals service, created idempotently),
each run's audit head, and the heads of trails that have no run row.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

from tether_common.audit import create_table

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_table(op.get_bind())
    op.add_column("runs", sa.Column("audit_head", sa.String(64)))
    op.create_table(
        "brain_audit_heads",
        sa.Column("trail", sa.String(200), primary_key=True),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    # `audit_records` stays: the approvals service writes its trails there too.
    op.drop_table("brain_audit_heads")
    op.drop_column("runs", "audit_head")
