"""The output-store's tables: outputs, their content-addressed chunks, open uploads."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY

metadata = MetaData()

chunks = Table(
    "output_chunks",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", Integer, nullable=False),
    # NULL: the bytes are in the JetStream object store, under the digest as its name.
    Column("data", LargeBinary, nullable=True),
    # Bumped by every writer that reuses the chunk, so the collector never deletes a chunk
    # an upload has just counted on (its DELETE re-checks this column on the locked row).
    Column("touched_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

outputs = Table(
    "outputs",
    metadata,
    Column("ref", String(40), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("media_type", String(100), nullable=False),
    Column("chunk_size", Integer, nullable=False),
    Column("chunk_digests", ARRAY(String(64)), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
    Column("lines", BigInteger, nullable=False, server_default="0"),
    # Newlines in each chunk: line paging finds its first chunk without reading the rest.
    Column("chunk_lines", ARRAY(Integer), nullable=True),
    # Set when the collector dropped the content; the row stays so the ref says `expired`.
    Column("purged_at", DateTime(timezone=True), nullable=True),
    Index("ix_outputs_chunk_digests", "chunk_digests", postgresql_using="gin"),
)

uploads = Table(
    "output_uploads",
    metadata,
    Column("upload_id", String(40), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("media_type", String(100), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("chunk_size", Integer, nullable=False),
    Column("chunks", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
)

upload_parts = Table(
    "output_upload_parts",
    metadata,
    Column(
        "upload_id",
        String(40),
        ForeignKey("output_uploads.upload_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("seq", Integer, primary_key=True),
    Column("digest", String(64), nullable=False, index=True),
)
