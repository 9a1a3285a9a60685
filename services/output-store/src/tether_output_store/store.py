"""Outputs in PostgreSQL as content-addressed, deduplicated chunks.

An output row is written in the same transaction as (or after) every chunk it names, so
a writer that dies half-way leaves nothing visible. Reads check who may see the ref: a
run that may not gets `not_found`, never a hint that the ref exists.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncGenerator, Collection, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_common.errors import NotFoundError
from tether_common.metrics import outputs_offloaded
from tether_output_store.tables import chunks, outputs

# Chunks fetched per query while streaming: few round trips, bounded memory.
READ_BATCH = 8


@dataclass(frozen=True, slots=True)
class StoredOutput:
    ref: str
    run_id: str
    size: int
    sha256: str
    media_type: str
    expires_at: datetime
    chunk_size: int
    digests: tuple[str, ...]
    chunk_lines: tuple[int, ...]
    lines: int


def count_lines(newlines: int, size: int, last_byte: int | None) -> int:
    """Lines in a blob: a last line without a newline still counts."""
    return newlines + (1 if size and last_byte != ord("\n") else 0)


async def save_chunks(conn: AsyncConnection, pieces: Sequence[bytes]) -> list[str]:
    """Upsert chunks by sha256; a reused chunk is touched so the collector keeps it."""
    digests = [hashlib.sha256(p).hexdigest() for p in pieces]
    rows = [
        {"digest": d, "size": len(p), "data": p}
        for d, p in dict(zip(digests, pieces, strict=True)).items()
    ]
    if rows:
        stmt = insert(chunks)
        await conn.execute(
            stmt.on_conflict_do_update(index_elements=["digest"], set_={"touched_at": func.now()}),
            rows,
        )
    return digests


class OutputStore:
    def __init__(self, engine: AsyncEngine, *, chunk_bytes: int, retention: timedelta) -> None:
        self.engine = engine
        self.chunk_bytes = chunk_bytes
        self.retention = retention

    async def put(self, run_id: str, data: bytes, media_type: str) -> StoredOutput:
        """Store a small blob in one transaction."""
        pieces = [data[i : i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)]
        per_chunk = [p.count(b"\n") for p in pieces]
        async with self.engine.begin() as conn:
            digests = await save_chunks(conn, pieces)
            stored = await self.insert_output(
                conn,
                run_id=run_id,
                media_type=media_type,
                sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
                digests=digests,
                chunk_lines=per_chunk,
                lines=count_lines(sum(per_chunk), len(data), data[-1] if data else None),
            )
        outputs_offloaded.add(stored.size)  # counted once committed, never for a rollback
        return stored

    async def insert_output(
        self,
        conn: AsyncConnection,
        *,
        run_id: str,
        media_type: str,
        sha256: str,
        size: int,
        digests: list[str],
        chunk_lines: list[int],
        lines: int,
    ) -> StoredOutput:
        now = datetime.now(UTC)
        stored = StoredOutput(
            ref=f"out_{uuid.uuid4().hex}",
            run_id=run_id,
            size=size,
            sha256=sha256,
            media_type=media_type,
            expires_at=now + self.retention,
            chunk_size=self.chunk_bytes,
            digests=tuple(digests),
            chunk_lines=tuple(chunk_lines),
            lines=lines,
        )
        await conn.execute(
            outputs.insert().values(
                ref=stored.ref,
                run_id=run_id,
                size=size,
                sha256=sha256,
                media_type=media_type,
                chunk_size=self.chunk_bytes,
                chunk_digests=digests,
                chunk_lines=chunk_lines,
                lines=lines,
                created_at=now,
                expires_at=stored.expires_at,
            )
        )
        return stored

    async def describe(self, ref: str, readers: Collection[str] | None) -> StoredOutput:
        """The output `ref` if one of `readers` (run ids) made it; None: an operator."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(outputs).where(outputs.c.ref == ref))).first()
        if row is None or (readers is not None and row.run_id not in readers):
            raise NotFoundError(f"no output '{ref}'")
        if row.purged_at is not None or row.expires_at <= datetime.now(UTC):
            raise NotFoundError(
                f"output '{ref}' has expired: its retention passed and it was deleted",
                code="expired",
            )
        return StoredOutput(
            ref=row.ref,
            run_id=row.run_id,
            size=row.size,
            sha256=row.sha256,
            media_type=row.media_type,
            expires_at=row.expires_at,
            chunk_size=row.chunk_size,
            digests=tuple(row.chunk_digests),
            chunk_lines=tuple(row.chunk_lines or ()),
            lines=row.lines,
        )

    async def iter_chunks(
        self, stored: StoredOutput, first: int = 0
    ) -> AsyncGenerator[bytes, None]:
        """The chunks of `stored` from index `first` on, fetched a few at a time."""
        for start in range(first, len(stored.digests), READ_BATCH):
            wanted = stored.digests[start : start + READ_BATCH]
            async with self.engine.connect() as conn:
                rows = await conn.execute(
                    select(chunks.c.digest, chunks.c.data).where(chunks.c.digest.in_(set(wanted)))
                )
                by_digest = {r.digest: bytes(r.data) for r in rows}
            for digest in wanted:
                yield by_digest[digest]

    async def read(self, stored: StoredOutput, offset: int, limit: int) -> bytes:
        """`limit` bytes from byte `offset`."""
        if offset >= stored.size:
            return b""
        first = offset // stored.chunk_size
        last = (min(offset + limit, stored.size) - 1) // stored.chunk_size
        parts: list[bytes] = []
        async with aclosing(self.iter_chunks(stored, first)) as pieces:
            async for piece in pieces:
                parts.append(piece)
                if len(parts) > last - first:
                    break
        start = offset - first * stored.chunk_size
        return b"".join(parts)[start : start + limit]
