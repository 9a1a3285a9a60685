"""Retention: a ref past its time answers `expired`, the collector drops its content and
the chunks nobody else uses, removes abandoned uploads, and takes turns between replicas."""

from __future__ import annotations

import base64
import hashlib

import asyncpg
import pytest

from tether_common.bus import Bus
from tether_common.errors import NotFoundError, TetherError
from tether_common.messages.outputs import BeginOutput, OutputChunk, QueryOutput
from tether_output_store.objects import BlobBucket
from tether_output_store.retention import LOCK_KEY, Collector
from tether_tools_runner.offload import upload


async def chunks_left(
    pg: asyncpg.Connection, digests: list[str], objects: BlobBucket | None
) -> int:
    """Chunk rows left of `digests`; under the JetStream backend their objects must be
    there exactly when their rows are."""
    found: int = await pg.fetchval(
        "SELECT count(*) FROM output_chunks WHERE digest = ANY($1::varchar[])", digests
    )
    if objects is not None:
        stored = [await objects.exists(d) for d in digests]
        assert sum(stored) == found, (stored, found)
    return found


async def test_expired_ref_answers_expired_and_gc_frees_its_chunks(
    obus: Bus,
    owner: str,
    pg: asyncpg.Connection,
    gc: Collector,
    objects: BlobBucket | None,
) -> None:
    kept = await upload(obus, owner, f"keep {owner}\n".encode() * 1000)
    gone = await upload(obus, owner, f"old {owner}\n".encode() * 1000)
    digests = await pg.fetchval("SELECT chunk_digests FROM outputs WHERE ref = $1", gone.ref)
    assert await chunks_left(pg, list(digests), objects) == len(digests)
    await pg.execute(
        "UPDATE outputs SET expires_at = now() - interval '1 second' WHERE ref = $1", gone.ref
    )
    ask = QueryOutput(ref=gone.ref, run_id=owner)
    # `expired` is not in tether_common.errors' wire table yet, so it arrives as a
    # RemoteError; the code is what callers (the retrieve tool) act on.
    with pytest.raises(TetherError) as before:
        await obus.request(obus.subjects.output_query, ask)
    assert before.value.code == "expired"

    done = await gc.collect(wait=True)
    assert done.purged >= 1
    assert not done.skipped
    assert await chunks_left(pg, list(digests), objects) == 0
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
    obus: Bus,
    owner: str,
    pg: asyncpg.Connection,
    gc: Collector,
    objects: BlobBucket | None,
) -> None:
    data = f"abandoned {owner}\n".encode() * 40_000
    begin = BeginOutput(run_id=owner, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    started = await obus.request(obus.subjects.output_begin, begin)
    piece = data[: started.chunk_size]
    chunk = OutputChunk(upload_id=started.upload_id, seq=0, data=base64.b64encode(piece).decode())
    await obus.request(obus.subjects.output_chunk, chunk)
    digest = hashlib.sha256(piece).hexdigest()
    await gc.collect(wait=True)
    assert await chunks_left(pg, [digest], objects) == 1  # the upload is still open: kept

    await pg.execute(
        "UPDATE output_uploads SET expires_at = now() - interval '1 second' WHERE upload_id = $1",
        started.upload_id,
    )
    done = await gc.collect(wait=True)
    assert done.uploads >= 1
    assert await chunks_left(pg, [digest], objects) == 0
    assert (
        await pg.fetchval(
            "SELECT count(*) FROM output_upload_parts WHERE upload_id = $1", started.upload_id
        )
        == 0
    )


async def test_replicas_take_turns(pg: asyncpg.Connection, gc: Collector) -> None:
    await pg.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        assert (await gc.collect()).skipped
    finally:
        await pg.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    assert not (await gc.collect()).skipped
