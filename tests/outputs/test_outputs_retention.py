"""Retention: a ref past its time answers `expired`, the collector drops its content and
the chunks nobody else uses, removes abandoned uploads, and takes turns between replicas."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.bus import Bus
from tether_common.db import make_engine
from tether_common.errors import NotFoundError, TetherError
from tether_common.messages.outputs import BeginOutput, OutputChunk, QueryOutput
from tether_output_store.retention import LOCK_KEY, Collector
from tether_tools_runner.offload import upload


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    made = make_engine(database_url, pool_size=2)
    try:
        yield made
    finally:
        await made.dispose()


def collector(engine: AsyncEngine) -> Collector:
    return Collector(engine, grace=timedelta(0), keep_tombstones=timedelta(days=30))


async def chunks_left(pg: asyncpg.Connection, digests: list[str]) -> int:
    found: int = await pg.fetchval(
        "SELECT count(*) FROM output_chunks WHERE digest = ANY($1::varchar[])", digests
    )
    return found


async def test_expired_ref_answers_expired_and_gc_frees_its_chunks(
    obus: Bus, owner: str, pg: asyncpg.Connection, engine: AsyncEngine
) -> None:
    kept = await upload(obus, owner, f"keep {owner}\n".encode() * 1000)
    gone = await upload(obus, owner, f"old {owner}\n".encode() * 1000)
    digests = await pg.fetchval("SELECT chunk_digests FROM outputs WHERE ref = $1", gone.ref)
    await pg.execute(
        "UPDATE outputs SET expires_at = now() - interval '1 second' WHERE ref = $1", gone.ref
    )
    ask = QueryOutput(ref=gone.ref, run_id=owner)
    # `expired` is not in tether_common.errors' wire table yet, so it arrives as a
    # RemoteError; the code is what callers (the retrieve tool) act on.
    with pytest.raises(TetherError) as before:
        await obus.request(obus.subjects.output_query, ask)
    assert before.value.code == "expired"

    done = await collector(engine).collect()
    assert done.purged >= 1
    assert not done.skipped
    assert await chunks_left(pg, list(digests)) == 0
    with pytest.raises(TetherError) as after:
        await obus.request(obus.subjects.output_query, ask)
    assert after.value.code == "expired"
    with pytest.raises(NotFoundError) as foreign:  # still no hint to other runs
        await obus.request(obus.subjects.output_query, ask.model_copy(update={"run_id": "x"}))
    assert foreign.value.code == "not_found"
    page = await obus.request(
        obus.subjects.output_query, QueryOutput(ref=kept.ref, run_id=owner, limit=1)
    )
    assert page.content == f"keep {owner}\n"


async def test_abandoned_uploads_and_their_chunks_are_collected(
    obus: Bus, owner: str, pg: asyncpg.Connection, engine: AsyncEngine
) -> None:
    data = f"abandoned {owner}\n".encode() * 40_000
    begin = BeginOutput(run_id=owner, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    started = await obus.request(obus.subjects.output_begin, begin)
    piece = data[: started.chunk_size]
    chunk = OutputChunk(upload_id=started.upload_id, seq=0, data=base64.b64encode(piece).decode())
    await obus.request(obus.subjects.output_chunk, chunk)
    digest = hashlib.sha256(piece).hexdigest()
    await collector(engine).collect()
    assert await chunks_left(pg, [digest]) == 1  # the upload is still open: kept

    await pg.execute(
        "UPDATE output_uploads SET expires_at = now() - interval '1 second' WHERE upload_id = $1",
        started.upload_id,
    )
    done = await collector(engine).collect()
    assert done.uploads >= 1
    assert await chunks_left(pg, [digest]) == 0
    assert (
        await pg.fetchval(
            "SELECT count(*) FROM output_upload_parts WHERE upload_id = $1", started.upload_id
        )
        == 0
    )


async def test_replicas_take_turns(pg: asyncpg.Connection, engine: AsyncEngine) -> None:
    await pg.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        assert (await collector(engine).collect()).skipped
    finally:
        await pg.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    assert not (await collector(engine).collect()).skipped
