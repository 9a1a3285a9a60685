"""Threads: conversations as sequences of runs (`threads`, `thread_turns`; see
`tether_brain.threads.store`), and an index on a run's thread (`options.thread_id`), which
the thread's remembered grants are read through.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("thread_id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200)),
        sa.Column("agent", sa.String(200)),
        sa.Column("provider", sa.String(64)),
        sa.Column("model", sa.String(200)),
        sa.Column("title", sa.Text),
        sa.Column("workspace", sa.String(16), nullable=False),
        sa.Column("budgets", JSONB, nullable=False, server_default="{}"),
        sa.Column("turns", sa.Integer, nullable=False, server_default="0"),
        sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_threads_created_at", "threads", ["created_at"])
    op.create_table(
        "thread_turns",
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("turn", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False, unique=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("thread_id", "turn"),
    )
    op.execute(
        "CREATE INDEX ix_runs_thread ON runs ((options->>'thread_id')) "
        "WHERE options->>'thread_id' IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_runs_thread")
    op.drop_table("thread_turns")
    op.drop_index("ix_threads_created_at", table_name="threads")
    op.drop_table("threads")
