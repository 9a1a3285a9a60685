"""Thin bus handlers of the output-store: decode → call the store → encode."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from tether_common.bus import Bus
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.outputs import (
    BeginOutput,
    ChunkStored,
    CommitOutput,
    GetOutput,
    OutputChunk,
    OutputContent,
    OutputPage,
    OutputStored,
    PutOutput,
    QueryOutput,
    UploadStarted,
)
from tether_output_store.query import QueryLimits, answer
from tether_output_store.store import OutputStore, StoredOutput
from tether_output_store.uploads import Uploads


def decode_content(body: PutOutput) -> bytes:
    if body.encoding == "utf-8":
        return body.content.encode()
    try:
        return base64.b64decode(body.content, validate=True)
    except ValueError:
        raise MessageError("content is not valid base64", code=ErrorCode.INVALID_MESSAGE) from None


def stored_reply(stored: StoredOutput) -> OutputStored:
    return OutputStored(
        ref=stored.ref,
        size=stored.size,
        sha256=stored.sha256,
        expires_at=stored.expires_at,
        lines=stored.lines,
    )


@dataclass(frozen=True, slots=True)
class Handlers:
    store: OutputStore
    uploads: Uploads
    limits: QueryLimits

    async def serve(self, bus: Bus) -> None:
        subjects = bus.subjects
        await bus.serve(subjects.output_put, self.put)
        await bus.serve(subjects.output_get, self.get)
        await bus.serve(subjects.output_begin, self.begin)
        await bus.serve(subjects.output_chunk, self.chunk)
        await bus.serve(subjects.output_commit, self.commit)
        await bus.serve(subjects.output_query, self.query)

    async def put(self, body: PutOutput) -> OutputStored:
        stored = await self.store.put(body.run_id, decode_content(body), body.media_type)
        return stored_reply(stored)

    async def get(self, body: GetOutput) -> OutputContent:
        stored = await self.store.describe(body.ref, {body.run_id})
        data = await self.store.read(stored, body.offset, body.limit)
        try:
            text, encoding = data.decode(), "utf-8"
        except UnicodeDecodeError:  # binary, or a page cut inside a character
            text, encoding = base64.b64encode(data).decode(), "base64"
        return OutputContent(
            ref=body.ref,
            size=stored.size,
            offset=body.offset,
            encoding=encoding,
            content=text,
            eof=body.offset + len(data) >= stored.size,
        )

    async def begin(self, body: BeginOutput) -> UploadStarted:
        upload_id, chunk_size, count = await self.uploads.begin(body)
        return UploadStarted(upload_id=upload_id, chunk_size=chunk_size, chunks=count)

    async def chunk(self, body: OutputChunk) -> ChunkStored:
        await self.uploads.chunk(body)
        return ChunkStored(upload_id=body.upload_id, seq=body.seq)

    async def commit(self, body: CommitOutput) -> OutputStored:
        return stored_reply(await self.uploads.commit(body.upload_id, body.run_id))

    async def query(self, body: QueryOutput) -> OutputPage:
        return await answer(self.store, body, self.limits)
