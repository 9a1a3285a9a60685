"""Tokens move to the shared identity tables (tether_common.identity): copy every row of
`tokens` into `identity_tokens` (tenant `default`; the roles keep their names: `viewer`
stays the read-only role, `approver` and `admin` mean what they meant), carry the
`_tokens` trail's head over to `identity_heads`, then drop `tokens`, so no second set of
hashes is left behind. The identity migrations run first (tether_common.service).

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "INSERT INTO identity_tokens (token_id, name, tenant, role, token_hash, agents,"
            " owners, created_at, created_by, revoked_at)"
            " SELECT token_id, name, 'default', role, token_hash, agents, owners, created_at,"
            " 'migrated from approvals', revoked_at FROM tokens"
            " ON CONFLICT DO NOTHING"
        )
    )
    op.execute(
        sa.text(
            "INSERT INTO identity_heads (trail, head, updated_at)"
            " SELECT trail, head, updated_at FROM audit_heads WHERE trail = '_tokens'"
            " ON CONFLICT (trail) DO UPDATE SET head = EXCLUDED.head,"
            " updated_at = EXCLUDED.updated_at"
        )
    )
    op.execute(sa.text("DELETE FROM audit_heads WHERE trail = '_tokens'"))
    op.drop_table("tokens")


def downgrade() -> None:
    raise NotImplementedError("tokens live in the identity tables from 0004 on")
