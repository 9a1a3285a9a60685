"""Outputs as content-addressed, deduplicated chunks, indexed in PostgreSQL.

A chunk's bytes sit in its PostgreSQL row (backend `postgres`) or, when the row has no
data, in the JetStream object store under the chunk's sha256 (backend `jetstream`). The
backend decides only where new chunks go; reads follow each row, so outputs written under
either stay readable after a switch.

An output row is written in the same transaction as (or after) every chunk it names, so
a writer that dies half-way leaves nothing visible. Reads check who may see the ref: a
run that may not gets `not_found`, never a hint that the ref exists.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncGenerator, Collection, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, cast

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_common.errors import ConfigError, ErrorCode, NotFoundError, StoreError
from tether_common.metrics import outputs_offloaded
from tether_output_store.objects import BlobBucket
from tether_output_store.tables import chunks, outputs

Backend = Literal["postgres", "jetstream"]

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


class OutputStore:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        chunk_bytes: int,
        retention: timedelta,
        objects: BlobBucket | None = None,
        backend: Backend = "postgres",
    ) -> None:
        if backend == "jetstream" and objects is None:
            raise ConfigError("the jetstream backend needs an object-store bucket")
        self.engine = engine
        self.chunk_bytes = chunk_bytes
        self.retention = retention
        self.objects = objects
        self.external = backend == "jetstream"

    async def save_chunks(self, conn: AsyncConnection, pieces: Sequence[bytes]) -> list[str]:
        """Upsert chunks by sha256; a reused chunk is touched so the collector keeps it.

        The upsert locks each row until `conn` commits, and the collector deletes a
        chunk's object only under that lock: so an object found here stays, and one the
        collector took is found missing and written again."""
        digests = [hashlib.sha256(p).hexdigest() for p in pieces]
        # Sorted: two writers sharing chunks lock them in one order, never a deadlock.
        unique = dict(sorted(zip(digests, pieces, strict=True)))
        if not unique:
            return digests
        values = [
            {"digest": d, "size": len(p), "data": None if self.external else p}
            for d, p in unique.items()
        ]
        stmt = (
            insert(chunks)
            .values(values)
            .on_conflict_do_update(index_elements=["digest"], set_={"touched_at": func.now()})
            .returning(chunks.c.digest, chunks.c.data.is_(None))
        )
        outside = [row[0] for row in await conn.execute(stmt) if row[1]]
        for digest in outside:
            objects = self._objects(digest)
            if not await objects.exists(digest):
                await objects.put(digest, unique[digest])
        return digests

    async def _fetch(self, digest: str) -> bytes:
        try:
            return await self._objects(digest).get(digest)
        except NotFoundError:  # the output exists; its bytes do not: say so, not not_found
            raise StoreError(
                f"chunk {digest[:12]} of a stored output is missing from the object store",
                code=ErrorCode.CHUNK_MISSING,
                retryable=False,
            ) from None

    def _objects(self, digest: str) -> BlobBucket:
        if self.objects is None:
            raise StoreError(
                f"chunk {digest[:12]} is in the JetStream object store, which this "
                "output-store has not been given",
                code=ErrorCode.STORE_UNAVAILABLE,
            )
        return self.objects

    async def put(self, run_id: str, data: bytes, media_type: str) -> StoredOutput:
        """Store a small blob in one transaction."""
        pieces = [data[i : i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)]
        per_chunk = [p.count(b"\n") for p in pieces]
        async with self.engine.begin() as conn:
            digests = await self.save_chunks(conn, pieces)
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
                code=ErrorCode.EXPIRED,
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
        self, stored: StoredOutput, first: int = 0, *, conn: AsyncConnection | None = None
    ) -> AsyncGenerator[bytes, None]:
        """The chunks of `stored` from index `first` on, fetched a few at a time; on `conn`
        when the caller holds one (a commit re-reading its upload inside its transaction
        must not wait for a second connection: with the pool's connections all held by
        such commits, none would ever get one)."""
        for start in range(first, len(stored.digests), READ_BATCH):
            wanted = stored.digests[start : start + READ_BATCH]
            by_digest = await self._stored_chunks(wanted, conn)
            outside = [d for d in dict.fromkeys(wanted) if by_digest.get(d) is None]
            fetched = await asyncio.gather(*(self._fetch(d) for d in outside))
            by_digest.update(zip(outside, fetched, strict=True))
            for digest in wanted:
                yield bytes(cast(bytes, by_digest[digest]))  # each was filled just above

    async def _stored_chunks(
        self, wanted: Sequence[str], conn: AsyncConnection | None
    ) -> dict[str, bytes | None]:
        query = select(chunks.c.digest, chunks.c.data).where(chunks.c.digest.in_(set(wanted)))
        if conn is not None:
            return {r.digest: r.data for r in await conn.execute(query)}
        async with self.engine.connect() as own:
            return {r.digest: r.data for r in await own.execute(query)}

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
