"""Chunked uploads, line counts per chunk, tombstones for expired outputs.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No TOAST compression for chunks: pglz runs at ~15 MB/s and was the bottleneck of
    # every upload (measured in bench/outputs.py); outputs live only days anyway.
    op.execute("ALTER TABLE output_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
    op.add_column(
        "output_chunks",
        sa.Column(
            "touched_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.add_column("outputs", sa.Column("lines", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("outputs", sa.Column("chunk_lines", ARRAY(sa.Integer), nullable=True))
    op.add_column("outputs", sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_outputs_chunk_digests", "outputs", ["chunk_digests"], postgresql_using="gin"
    )
    op.create_table(
        "output_uploads",
        sa.Column("upload_id", sa.String(40), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("chunk_size", sa.Integer, nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False, index=True),
    )
    op.create_table(
        "output_upload_parts",
        sa.Column(
            "upload_id",
            sa.String(40),
            sa.ForeignKey("output_uploads.upload_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, index=True),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE output_chunks ALTER COLUMN data SET STORAGE EXTENDED")
    op.drop_table("output_upload_parts")
    op.drop_table("output_uploads")
    op.drop_index("ix_outputs_chunk_digests", table_name="outputs")
    op.drop_column("outputs", "purged_at")
    op.drop_column("outputs", "chunk_lines")
    op.drop_column("outputs", "lines")
    op.drop_column("output_chunks", "touched_at")
