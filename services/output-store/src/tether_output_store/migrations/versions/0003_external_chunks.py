"""Chunks whose bytes live in the JetStream object store: a row without data.

Revision ID: 0003
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column("output_chunks", "data", nullable=True)


def downgrade() -> None:
    # Fails (NOT NULL violated) while any chunk's bytes are still in the object store:
    # outputs would lose content, so the operator must let them expire first.
    op.alter_column("output_chunks", "data", nullable=False)
