"""The JetStream object-store backend on its own: chunk bytes live in the bucket (the rows
keep only the index), outputs stay readable across a switch of backend in either
direction, and the collector and writers stay consistent through the awkward moments: a
chunk a writer holds, an object the collector took before it crashed, an object whose
writer died before committing, a chunk message no object names."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

import asyncpg
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.bus import Bus
from tether_common.errors import StoreError, TetherError
from tether_common.messages.outputs import QueryOutput
from tether_output_store.objects import BlobBucket
from tether_output_store.retention import Collector
from tether_output_store.settings import OutputSettings
from tether_output_store.store import OutputStore
from tether_tools_runner.offload import upload

CHUNK = 256 * 1024


@pytest.fixture(scope="module")
def backend() -> str:
    """Only the JetStream backend here (the other tests run under both)."""
    return "jetstream"


@pytest.fixture
def bucket(objects: BlobBucket | None) -> BlobBucket:
    assert objects is not None
    return objects


def store(engine: AsyncEngine, bucket: BlobBucket, backend: str) -> OutputStore:
    return OutputStore(
        engine,
        chunk_bytes=CHUNK,
        retention=timedelta(days=1),
        objects=bucket,
        backend="jetstream" if backend == "jetstream" else "postgres",
    )


def text_blob(seed: str, size: int) -> bytes:
    raw = hashlib.shake_256(seed.encode()).digest(size // 2).hex().encode()
    return b"\n".join(raw[i : i + 64] for i in range(0, size, 65))[:size]


async def read_back(store_: OutputStore, ref: str, owner: str) -> bytes:
    stored = await store_.describe(ref, {owner})
    return await store_.read(stored, 0, stored.size)


async def test_chunk_bytes_live_in_the_bucket_not_in_postgres(
    obus: Bus, owner: str, pg: asyncpg.Connection, bucket: BlobBucket
) -> None:
    data = text_blob(owner, 3 * CHUNK + 1000)
    stored = await upload(obus, owner, data)
    rows = await pg.fetch(
        "SELECT c.digest, c.data IS NULL AS external FROM outputs o "
        "JOIN output_chunks c ON c.digest = ANY(o.chunk_digests) WHERE o.ref = $1",
        stored.ref,
    )
    assert len(rows) == 4
    assert all(r["external"] for r in rows)
    for row in rows:
        piece = await bucket.get(row["digest"])
        assert hashlib.sha256(piece).hexdigest() == row["digest"]
    page = await obus.request(
        obus.subjects.output_query, QueryOutput(ref=stored.ref, run_id=owner, limit=2)
    )
    assert page.content.encode() == b"\n".join(data.split(b"\n")[:2]) + b"\n"


@pytest.mark.parametrize(("first", "then"), [("postgres", "jetstream"), ("jetstream", "postgres")])
async def test_outputs_stay_readable_across_a_switch_of_backend(
    engine: AsyncEngine, bucket: BlobBucket, owner: str, first: str, then: str
) -> None:
    before, after = store(engine, bucket, first), store(engine, bucket, then)
    shared = text_blob(owner, CHUNK)
    old = await before.put(owner, shared + b"old tail\n", "text/plain")
    new = await after.put(owner, shared + b"new tail\n", "text/plain")  # reuses chunk 0
    assert old.digests[0] == new.digests[0]
    for reader in (before, after):
        assert await read_back(reader, old.ref, owner) == shared + b"old tail\n"
        assert await read_back(reader, new.ref, owner) == shared + b"new tail\n"


async def test_a_chunk_a_writer_holds_is_not_collected(
    engine: AsyncEngine, bucket: BlobBucket, owner: str, pg: asyncpg.Connection, gc: Collector
) -> None:
    """An unused chunk whose row a writer has locked (it is about to reuse it) is skipped,
    object and all; the next pass takes it once nobody holds it."""
    js_store = store(engine, bucket, "jetstream")
    stored = await js_store.put(owner, text_blob(owner, 5000), "text/plain")
    (digest,) = stored.digests
    await pg.execute("DELETE FROM outputs WHERE ref = $1", stored.ref)
    async with engine.connect() as holder:  # a writer mid-transaction on this chunk
        await js_store.save_chunks(holder, [text_blob(owner, 5000)])
        await gc.collect(wait=True)
        assert await bucket.exists(digest)
        await holder.rollback()
    await pg.execute(
        "UPDATE output_chunks SET touched_at = now() - interval '1 hour' WHERE digest = $1",
        digest,
    )
    assert (await gc.collect(wait=True)).chunks >= 1
    assert not await bucket.exists(digest)
    assert await pg.fetchval("SELECT count(*) FROM output_chunks WHERE digest = $1", digest) == 0


async def test_a_writer_rewrites_an_object_the_collector_took_before_it_crashed(
    engine: AsyncEngine, bucket: BlobBucket, owner: str, pg: asyncpg.Connection
) -> None:
    """A collector that deleted a chunk's object and died before deleting its row leaves a
    row without bytes; a writer reusing the chunk finds the object missing and writes it."""
    js_store = store(engine, bucket, "jetstream")
    data = text_blob(owner, 7000)
    first = await js_store.put(owner, data, "text/plain")
    await pg.execute("DELETE FROM outputs WHERE ref = $1", first.ref)
    await bucket.delete(first.digests)  # the crash: object gone, row left
    again = await js_store.put(owner, data, "text/plain")
    assert again.digests == first.digests
    assert await read_back(js_store, again.ref, owner) == data


async def test_an_object_whose_writer_died_is_adopted_and_collected(
    bucket: BlobBucket, pg: asyncpg.Connection, gc: Collector
) -> None:
    piece = f"orphan {uuid.uuid4().hex}".encode()
    digest = hashlib.sha256(piece).hexdigest()
    await bucket.put(digest, piece)  # written, but its row never committed
    assert await gc.adopt_orphans() >= 1
    row = await pg.fetchrow("SELECT data, touched_at FROM output_chunks WHERE digest = $1", digest)
    assert row is not None
    assert row["data"] is None
    assert (await gc.collect(wait=True)).chunks >= 1
    assert not await bucket.exists(digest)


async def test_a_chunk_message_no_object_names_is_purged_on_the_second_sweep(
    obus: Bus, bucket: BlobBucket
) -> None:
    """A writer killed between its chunk message and its meta message leaves the chunk
    unnamed; one sweep notes it, the next (an interval later) purges it."""
    await bucket.open()
    subject = f"$O.{bucket.name}.C.{uuid.uuid4().hex}"
    await obus.jetstream.publish(subject, b"half of a put")

    async def present() -> bool:
        info = await obus.jetstream.stream_info(bucket.stream, subjects_filter=subject)
        return subject in (info.state.subjects or {})

    assert await present()
    await bucket.sweep_unnamed()
    assert await present()  # may be a put in flight: kept once
    assert await bucket.sweep_unnamed() >= 1
    assert not await present()


def test_the_backend_setting_names_one_of_two() -> None:
    assert OutputSettings(backend="jetstream").backend == "jetstream"
    with pytest.raises(ValidationError):
        OutputSettings(backend="s3")


async def test_a_lost_object_is_reported_as_such_not_as_a_missing_ref(
    obus: Bus, owner: str, pg: asyncpg.Connection, bucket: BlobBucket
) -> None:
    stored = await upload(obus, owner, text_blob(owner, 9000))
    digests = await pg.fetchval("SELECT chunk_digests FROM outputs WHERE ref = $1", stored.ref)
    await bucket.delete(digests)  # lost behind the store's back
    with pytest.raises(TetherError) as lost:
        await obus.request(obus.subjects.output_query, QueryOutput(ref=stored.ref, run_id=owner))
    assert lost.value.code == "chunk_missing"


async def test_a_bounded_bucket_refuses_writes_when_full(obus: Bus) -> None:
    full = BlobBucket(obus, f"FULL_{uuid.uuid4().hex[:8]}", create=True, max_bytes=1024 * 1024)
    try:
        await full.put("a" * 64, b"x" * 600_000)
        with pytest.raises(StoreError):
            await full.put("b" * 64, b"y" * 600_000)
        assert not await full.exists("b" * 64)
    finally:
        await obus.jetstream.delete_stream(full.stream)
