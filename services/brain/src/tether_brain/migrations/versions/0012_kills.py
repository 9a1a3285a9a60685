"""The kill switch: `kills` holds every kill an admin set (scope `all`, a `tenant`, or an
`agent` of a tenant), who set it, when and why; a lifted kill keeps its row with who
lifted it and when. At most one kill is in force per target (a partial unique index).

Revision ID: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kills",
        sa.Column("kill_id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(200)),
        sa.Column("agent", sa.String(200)),
        sa.Column("reason", sa.Text),
        sa.Column("killed_by", sa.String(200), nullable=False),
        sa.Column("killed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lifted_by", sa.String(200)),
        sa.Column("lifted_at", sa.DateTime(timezone=True)),
        sa.Column("lift_reason", sa.Text),
        sa.CheckConstraint(
            "(scope = 'all' AND tenant IS NULL AND agent IS NULL) OR "
            "(scope = 'tenant' AND tenant IS NOT NULL AND agent IS NULL) OR "
            "(scope = 'agent' AND tenant IS NOT NULL AND agent IS NOT NULL)",
            name="ck_kills_scope",
        ),
    )
    op.execute(
        "CREATE UNIQUE INDEX ux_kills_in_force ON kills "
        "(scope, COALESCE(tenant, ''), COALESCE(agent, '')) WHERE lifted_at IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ux_kills_in_force")
    op.drop_table("kills")
