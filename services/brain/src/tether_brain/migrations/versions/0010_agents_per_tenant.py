"""Agent ids are unique per tenant: the `agents` key becomes (tenant, agent_id), so two
tenants may each have an agent `rtw`, and creating one says nothing about the other's.

Revision ID: 0010
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("agents_pkey", "agents", type_="primary")
    op.create_primary_key("agents_pkey", "agents", ["tenant", "agent_id"])


def downgrade() -> None:
    # Fails while two tenants hold the same id: which one to keep is not ours to guess.
    op.drop_constraint("agents_pkey", "agents", type_="primary")
    op.create_primary_key("agents_pkey", "agents", ["agent_id"])
