"""Outputs in PostgreSQL as content-addressed, deduplicated chunks.

An output row and its chunks are written in one transaction, so a writer that dies
half-way leaves nothing visible.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.errors import NotFoundError

metadata = MetaData()

chunks = Table(
    "output_chunks",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("size", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
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
)


@dataclass(frozen=True, slots=True)
class StoredOutput:
    ref: str
    run_id: str
    size: int
    sha256: str
    media_type: str
    expires_at: datetime


class OutputStore:
    def __init__(self, engine: AsyncEngine, *, chunk_bytes: int, retention: timedelta) -> None:
        self.engine = engine
        self.chunk_bytes = chunk_bytes
        self.retention = retention

    async def put(self, run_id: str, data: bytes, media_type: str) -> StoredOutput:
        pieces = [data[i : i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)]
        digests = [hashlib.sha256(p).hexdigest() for p in pieces]
        now = datetime.now(UTC)
        stored = StoredOutput(
            ref=f"out_{uuid.uuid4().hex}",
            run_id=run_id,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            media_type=media_type,
            expires_at=now + self.retention,
        )
        async with self.engine.begin() as conn:
            if pieces:
                rows = [
                    {"digest": d, "size": len(p), "data": p}
                    for d, p in dict(zip(digests, pieces, strict=True)).items()
                ]
                await conn.execute(insert(chunks).on_conflict_do_nothing(), rows)
            await conn.execute(
                outputs.insert().values(
                    ref=stored.ref,
                    run_id=run_id,
                    size=stored.size,
                    sha256=stored.sha256,
                    media_type=media_type,
                    chunk_size=self.chunk_bytes,
                    chunk_digests=digests,
                    created_at=now,
                    expires_at=stored.expires_at,
                )
            )
        return stored

    async def describe(self, ref: str, run_id: str | None) -> tuple[StoredOutput, int, list[str]]:
        """The output `ref`, if `run_id` may read it (None: an operator); else not_found."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(outputs).where(outputs.c.ref == ref))).first()
        if row is None or (run_id is not None and row.run_id != run_id):
            raise NotFoundError(f"no output '{ref}'")
        if row.expires_at <= datetime.now(UTC):
            raise NotFoundError(f"output '{ref}' has expired (retention passed)", code="expired")
        stored = StoredOutput(
            row.ref, row.run_id, row.size, row.sha256, row.media_type, row.expires_at
        )
        return stored, row.chunk_size, list(row.chunk_digests)

    async def read(
        self, ref: str, run_id: str | None, offset: int, limit: int
    ) -> tuple[StoredOutput, bytes]:
        stored, chunk_size, digests = await self.describe(ref, run_id)
        first, last = offset // chunk_size, (offset + limit - 1) // chunk_size
        wanted = digests[first : last + 1]
        if not wanted:
            return stored, b""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(chunks.c.digest, chunks.c.data).where(chunks.c.digest.in_(wanted))
            )
            by_digest = {r.digest: bytes(r.data) for r in rows}
        blob = b"".join(by_digest[d] for d in wanted)
        start = offset - first * chunk_size
        return stored, blob[start : start + limit]
