"""Documents for retrieval: `documents` holds each tenant's documents by collection, who
may read each (`readers`: `role:<role>`, `user:<name>`, `*`), and a weighted full-text
vector (title A, body B, the `english` configuration) kept by PostgreSQL itself, with a
GIN index for `@@` and one on `readers` for the overlap (`&&`) that filters by caller.

Revision ID: 0014
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, TSVECTOR

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("doc_id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("collection", sa.String(200), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("readers", ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "search",
            TSVECTOR,
            sa.Computed(
                "setweight(to_tsvector('english'::regconfig, title), 'A') || "
                "setweight(to_tsvector('english'::regconfig, body), 'B')",
                persisted=True,
            ),
            nullable=False,
        ),
    )
    op.create_index("ix_documents_tenant_collection", "documents", ["tenant", "collection"])
    op.create_index("ix_documents_search", "documents", ["search"], postgresql_using="gin")
    op.create_index("ix_documents_readers", "documents", ["readers"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("ix_documents_readers", table_name="documents")
    op.drop_index("ix_documents_search", table_name="documents")
    op.drop_index("ix_documents_tenant_collection", table_name="documents")
    op.drop_table("documents")
