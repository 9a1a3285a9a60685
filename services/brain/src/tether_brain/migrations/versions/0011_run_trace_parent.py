"""A run's trace: `runs.trace_parent` holds the W3C `traceparent` of the span that
started it (the request, or its parent's `run_agent` span), so every later segment of its
work (after a park, a takeover, on any replica) is a child of it and the run is one trace.
Runs stored before this have none: their segments start where they are resumed, as before.

Revision ID: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("trace_parent", sa.String(64)))


def downgrade() -> None:
    op.drop_column("runs", "trace_parent")
