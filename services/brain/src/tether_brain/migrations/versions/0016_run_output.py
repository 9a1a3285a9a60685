"""Typed answers: `runs.output` holds a typed run's answer as the object its output
schema accepted (`tether_common.typed_answers`), beside `runs.answer`. The schemas
themselves are pinned in the run's `options` at its start. Runs stored before have none.

Revision ID: 0016
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0014"  # 0015 was never used: tenant tool servers live in the runner
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("output", JSONB))


def downgrade() -> None:
    op.drop_column("runs", "output")
