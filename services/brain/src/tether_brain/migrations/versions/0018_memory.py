"""Memory across threads: `memories` holds what runs saved (`memory_save`) and what
operators added, each in one namespace (tenant, agent, owner; no owner: the agent's own,
for every user), with a full-text vector of its text (the `english` configuration, as
the documents') kept by PostgreSQL itself and a GIN index for `@@`. A thread may recall
its best memories into each turn's prompt: `threads.recall` says how many (0: none).

Revision ID: 0018
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TSVECTOR

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("memory_id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("agent", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200)),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "search",
            TSVECTOR,
            sa.Computed("to_tsvector('english'::regconfig, text)", persisted=True),
            nullable=False,
        ),
    )
    op.create_index("ix_memories_namespace", "memories", ["tenant", "agent", "owner"])
    op.create_index("ix_memories_owner", "memories", ["tenant", "owner"])
    op.create_index("ix_memories_search", "memories", ["search"], postgresql_using="gin")
    op.add_column("threads", sa.Column("recall", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("threads", "recall")
    op.drop_index("ix_memories_search", table_name="memories")
    op.drop_index("ix_memories_owner", table_name="memories")
    op.drop_index("ix_memories_namespace", table_name="memories")
    op.drop_table("memories")
