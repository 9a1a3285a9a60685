"""Chunked uploads: begin → chunk … → commit.

Chunks land in the content-addressed chunk table at once (deduplicated), tied to the
upload by part rows; the output row appears only at commit, after the whole content has
been re-read from PostgreSQL and its size and sha256 checked, in one transaction. Any
replica may take any message of an upload, so no state is kept in memory. An upload
never committed expires and the collector removes it and the chunks only it used.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_common.errors import ConflictError, ErrorCode, MessageError, NotFoundError
from tether_common.messages.outputs import BeginOutput, OutputChunk
from tether_common.metrics import outputs_offloaded
from tether_output_store.store import OutputStore, StoredOutput, count_lines
from tether_output_store.tables import upload_parts, uploads


def decode_chunk(data: str) -> bytes:
    # Not `validate=True`: its regular-expression pass costs more than the decoding, and
    # the sha256 check at commit catches any corruption anyway.
    try:
        return base64.b64decode(data)
    except ValueError:
        raise MessageError(
            "chunk data is not valid base64", code=ErrorCode.INVALID_MESSAGE
        ) from None


class Uploads:
    def __init__(self, store: OutputStore, *, ttl: timedelta) -> None:
        self.store = store
        self.ttl = ttl

    async def begin(self, body: BeginOutput) -> tuple[str, int, int]:
        """Open an upload; returns (upload_id, chunk_size, number of chunks)."""
        size = self.store.chunk_bytes
        count = -(-body.size // size)
        upload_id = f"up_{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        async with self.store.engine.begin() as conn:
            await conn.execute(
                uploads.insert().values(
                    upload_id=upload_id,
                    run_id=body.run_id,
                    media_type=body.media_type,
                    size=body.size,
                    sha256=body.sha256,
                    chunk_size=size,
                    chunks=count,
                    created_at=now,
                    expires_at=now + self.ttl,
                )
            )
        return upload_id, size, count

    async def chunk(self, body: OutputChunk) -> None:
        """Store one chunk; sending the same seq again is harmless (retries)."""
        data = decode_chunk(body.data)
        async with self.store.engine.begin() as conn:
            # No fsync per chunk: the commit's own WAL flush makes every earlier chunk
            # durable too (WAL is sequential), and commit re-reads them all anyway.
            await conn.execute(text("SET LOCAL synchronous_commit = off"))
            row = (
                await conn.execute(select(uploads).where(uploads.c.upload_id == body.upload_id))
            ).first()
            if row is None or row.expires_at <= datetime.now(UTC):
                raise NotFoundError(f"no open upload '{body.upload_id}'")
            expected = min(row.chunk_size, row.size - body.seq * row.chunk_size)
            if body.seq >= row.chunks or len(data) != expected:
                raise MessageError(
                    f"chunk {body.seq} has {len(data)} bytes; expected {max(expected, 0)} "
                    f"(chunk {body.seq} of {row.chunks})",
                    code=ErrorCode.INVALID_MESSAGE,
                )
            (digest,) = await self.store.save_chunks(conn, [data])
            stmt = insert(upload_parts).values(
                upload_id=body.upload_id, seq=body.seq, digest=digest
            )
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["upload_id", "seq"], set_={"digest": digest}
                )
            )

    async def commit(self, upload_id: str, run_id: str) -> StoredOutput:
        """Verify and publish the upload as an output, atomically."""
        async with self.store.engine.begin() as conn:
            draft = await self._locked_draft(conn, upload_id, run_id)
            per_chunk, lines = await self._verify(draft, conn)
            stored = await self.store.insert_output(
                conn,
                run_id=run_id,
                media_type=draft.media_type,
                sha256=draft.sha256,
                size=draft.size,
                digests=list(draft.digests),
                chunk_lines=per_chunk,
                lines=lines,
            )
            await conn.execute(uploads.delete().where(uploads.c.upload_id == upload_id))
        outputs_offloaded.add(stored.size)  # counted once committed, never for a rollback
        return stored

    async def _locked_draft(
        self, conn: AsyncConnection, upload_id: str, run_id: str
    ) -> StoredOutput:
        """The upload as an output-to-be, its row locked so one commit wins; it must be
        open, of `run_id`, and complete."""
        query = select(uploads).where(uploads.c.upload_id == upload_id).with_for_update()
        row = (await conn.execute(query)).first()
        if row is None or row.run_id != run_id or row.expires_at <= datetime.now(UTC):
            raise NotFoundError(f"no open upload '{upload_id}'")
        parts = await conn.execute(
            select(upload_parts.c.digest)
            .where(upload_parts.c.upload_id == upload_id)
            .order_by(upload_parts.c.seq)
        )
        digests = tuple(p.digest for p in parts)
        if len(digests) != row.chunks:
            raise ConflictError(f"upload '{upload_id}' has {len(digests)} of {row.chunks} chunks")
        return StoredOutput(
            upload_id, run_id, row.size, row.sha256, row.media_type,
            row.expires_at, row.chunk_size, digests, (), 0,
        )  # fmt: skip

    async def _verify(self, draft: StoredOutput, conn: AsyncConnection) -> tuple[list[int], int]:
        """Re-read the uploaded chunks (on the commit's own connection): size and sha256
        must match what `begin` announced."""
        hasher, size, per_chunk, last = hashlib.sha256(), 0, [], None
        async for piece in self.store.iter_chunks(draft, conn=conn):
            hasher.update(piece)
            size += len(piece)
            per_chunk.append(piece.count(b"\n"))
            last = piece[-1] if piece else last
        if size != draft.size or hasher.hexdigest() != draft.sha256:
            raise ConflictError(
                f"upload does not match its announced size and sha256 ({size} bytes received)",
                code=ErrorCode.CHECKSUM_MISMATCH,
            )
        return per_chunk, count_lines(sum(per_chunk), size, last)
