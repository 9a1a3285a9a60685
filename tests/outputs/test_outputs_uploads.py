"""Chunked uploads: verified at commit, deduplicated across concurrent writers, refused
when incomplete or corrupt, and never visible before commit."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import asyncpg
import pytest

from tether_common.bus import Bus
from tether_common.errors import ConflictError, MessageError, NotFoundError, TetherError
from tether_common.messages.outputs import (
    BeginOutput,
    CommitOutput,
    GetOutput,
    OutputChunk,
    UploadStarted,
)
from tether_tools_runner.offload import upload

MIB = 1024 * 1024


def blob(seed: str, size: int) -> bytes:
    return hashlib.shake_256(seed.encode()).digest(size // 2).hex().encode()


async def begin(bus: Bus, owner: str, data: bytes) -> UploadStarted:
    body = BeginOutput(run_id=owner, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    return await bus.request(bus.subjects.output_begin, body)


async def send(bus: Bus, started: UploadStarted, data: bytes, seqs: range | list[int]) -> None:
    size = started.chunk_size
    for seq in seqs:
        piece = data[seq * size : (seq + 1) * size]
        body = OutputChunk(
            upload_id=started.upload_id, seq=seq, data=base64.b64encode(piece).decode()
        )
        await bus.request(bus.subjects.output_chunk, body)


async def read_all(bus: Bus, ref: str, owner: str, size: int) -> bytes:
    parts = []
    for offset in range(0, size, 512 * 1024):
        got = await bus.request(
            bus.subjects.output_get, GetOutput(ref=ref, run_id=owner, offset=offset)
        )
        parts.append(got.content.encode() if got.encoding == "utf-8" else b"")
    return b"".join(parts)


async def test_concurrent_writers_share_chunks(
    obus: Bus, owner: str, pg: asyncpg.Connection
) -> None:
    same, other = blob(owner, 2 * MIB), blob(owner + "x", 2 * MIB)
    payloads = [same, same, same, other, other, same]
    stored = await asyncio.gather(*(upload(obus, owner, p) for p in payloads))
    assert len({s.ref for s in stored}) == len(payloads)
    for item, data in zip(stored, payloads, strict=True):
        assert item.sha256 == hashlib.sha256(data).hexdigest()
        assert await read_all(obus, item.ref, owner, item.size) == data
    rows = await pg.fetch(
        "SELECT chunk_digests FROM outputs WHERE ref = ANY($1::varchar[])", [s.ref for s in stored]
    )
    digests = {d for row in rows for d in row["chunk_digests"]}
    assert len(digests) == 16  # two distinct 2 MiB blobs in 256 KiB chunks, stored once
    count = await pg.fetchval(
        "SELECT count(*) FROM output_chunks WHERE digest = ANY($1::varchar[])", list(digests)
    )
    assert count == 16


async def test_an_incomplete_upload_is_refused_and_invisible(
    obus: Bus, owner: str, pg: asyncpg.Connection
) -> None:
    data = blob(owner, MIB)
    started = await begin(obus, owner, data)
    await send(obus, started, data, range(started.chunks - 1))
    with pytest.raises(ConflictError, match="3 of 4 chunks"):
        await obus.request(
            obus.subjects.output_commit, CommitOutput(upload_id=started.upload_id, run_id=owner)
        )
    assert await pg.fetchval("SELECT count(*) FROM outputs WHERE run_id = $1", owner) == 0
    with pytest.raises(NotFoundError):  # only its own run may commit it
        await obus.request(
            obus.subjects.output_commit,
            CommitOutput(upload_id=started.upload_id, run_id="run_other"),
        )
    await send(obus, started, data, [started.chunks - 1, 0])  # a resent chunk is harmless
    done = await obus.request(
        obus.subjects.output_commit, CommitOutput(upload_id=started.upload_id, run_id=owner)
    )
    assert done.size == len(data)  # one line, no newline
    assert done.lines == 1


async def test_corrupt_or_misshaped_chunks_are_refused(obus: Bus, owner: str) -> None:
    data = blob(owner, MIB)
    started = await begin(obus, owner, data)
    with pytest.raises(MessageError, match="expected 262144"):
        await send(obus, started, data[:1000], [0])
    swapped = data[MIB // 2 :] + data[: MIB // 2]  # right sizes, wrong content
    await send(obus, started, swapped, range(started.chunks))
    with pytest.raises(TetherError) as bad:
        await obus.request(
            obus.subjects.output_commit, CommitOutput(upload_id=started.upload_id, run_id=owner)
        )
    assert bad.value.code == "checksum_mismatch"
