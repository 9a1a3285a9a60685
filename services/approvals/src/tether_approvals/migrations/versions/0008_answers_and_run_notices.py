"""Edited approvals and run notices (issue 32): an operator's edit (`edited_args`) or
response (`response`) on the request, the tool's argument schema an edit is checked
against, and run notices in the outbox (`run_id`; `approval_id` only for a park).

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("approvals", sa.Column("edited_args", JSONB))
    op.add_column("approvals", sa.Column("response", sa.Text))
    op.add_column("approvals", sa.Column("arguments_schema", JSONB))
    op.add_column("notice_outbox", sa.Column("run_id", sa.String(64)))
    op.alter_column("notice_outbox", "approval_id", nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM notice_outbox WHERE approval_id IS NULL")
    op.alter_column("notice_outbox", "approval_id", nullable=False)
    op.drop_column("notice_outbox", "run_id")
    op.drop_column("approvals", "arguments_schema")
    op.drop_column("approvals", "response")
    op.drop_column("approvals", "edited_args")
