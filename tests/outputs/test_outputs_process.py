"""The output-store as a real process, under each backend: a 100 MiB output stored and
downloaded over HTTP, and a SIGKILL in the middle of an upload leaves nothing
half-visible."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from shipped import observe, one_service
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.db import make_engine
from tether_common.errors import TetherError
from tether_common.messages.outputs import BeginOutput, CommitOutput, OutputChunk, QueryOutput
from tether_common.testing import until
from tether_output_store.objects import BlobBucket
from tether_output_store.retention import Collector
from tether_tools_runner.offload import maybe_offload

TOKEN = "process-operator-token"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
async def store_process(database_url: str, backend: str) -> AsyncIterator[Supervisor]:
    env = {"TETHER_OUTPUTS_BACKEND": backend, "TETHER_LOG_LEVEL": "WARNING"}
    async with one_service(
        "output-store", database_url, operator_token=TOKEN, extra_env=env
    ) as supervisor:
        yield supervisor


@pytest.fixture(scope="module")
async def pbus(store_process: Supervisor) -> AsyncIterator[Bus]:
    client = await observe(store_process)
    try:
        yield client
    finally:
        await client.close()


def hex_lines(seed: str, size: int) -> bytes:
    """`size` bytes of 64-character hex lines, the same for the same seed."""
    raw = hashlib.shake_256(seed.encode()).digest(size // 2).hex().encode()
    return b"\n".join(raw[i : i + 64] for i in range(0, size, 65))[:size]


async def test_a_100_mib_output_round_trips(
    store_process: Supervisor, pbus: Bus, owner: str
) -> None:
    data = hex_lines(owner, 100 * MIB)
    seen, ref = await maybe_offload(pbus, owner, "shell", data, threshold=4096)
    assert ref is not None
    assert f"{100 * MIB} bytes" in seen
    expected = hashlib.sha256(data).hexdigest()
    lines = data.count(b"\n") + 1
    del data  # keep one copy at most while downloading

    got = hashlib.sha256()
    url = f"{store_process.child('output-store').url}/v1/outputs/{ref}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("GET", url, headers=auth) as response:
            assert response.status_code == 200
            assert response.headers["x-content-sha256"] == expected
            async for piece in response.aiter_bytes():
                got.update(piece)
        assert (await client.get(url)).status_code == 401
    assert got.hexdigest() == expected
    last = await pbus.request(
        pbus.subjects.output_query, QueryOutput(ref=ref, run_id=owner, offset=lines - 1)
    )
    assert last.lines == lines
    assert last.next_offset is None
    assert len(last.content) <= 64


async def until_parts(pg: asyncpg.Connection, upload_id: str, count: int) -> None:
    """Wait until `count` chunks of the upload are stored (polled: the store is another
    process and announces nothing)."""
    query = "SELECT count(*) FROM output_upload_parts WHERE upload_id = $1"
    await until(
        lambda: pg.fetchval(query, upload_id),
        done=lambda stored: stored >= count,
        timeout=20,
        every=0.02,
        what=f"{count} chunks of {upload_id} stored",
    )


async def send_forever(bus: Bus, upload_id: str, data: bytes, chunk_size: int) -> int:
    """Send chunks one after another until the store goes away; returns how many landed."""
    sent = 0
    with contextlib.suppress(TetherError):
        for seq in range(-(-len(data) // chunk_size)):
            piece = data[seq * chunk_size : (seq + 1) * chunk_size]
            body = OutputChunk(upload_id=upload_id, seq=seq, data=base64.b64encode(piece).decode())
            await bus.request(bus.subjects.output_chunk, body, timeout=3)
            sent += 1
    return sent


def bucket_of(bus: Bus, backend: str) -> BlobBucket | None:
    return BlobBucket(bus, bus.subjects.output_bucket) if backend == "jetstream" else None


async def test_killed_mid_upload_leaves_nothing_visible(
    store_process: Supervisor, pbus: Bus, owner: str, database_url: str, backend: str
) -> None:
    data = hex_lines(owner, 32 * MIB)
    begin = BeginOutput(run_id=owner, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    started = await pbus.request(pbus.subjects.output_begin, begin)
    sender = asyncio.create_task(send_forever(pbus, started.upload_id, data, started.chunk_size))
    pg = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        await until_parts(pg, started.upload_id, 8)
        store_process.kill("output-store")
        sent = await sender
        # The kill may land between the 8th part's commit and its answer: 7 answered.
        assert 7 <= sent < started.chunks

        child = store_process.child("output-store")
        await store_process.start_child(child)
        await store_process.wait_ready(timeout=60, children=[child])
        with pytest.raises(TetherError):  # the chunks after the kill never arrived
            await pbus.request(
                pbus.subjects.output_commit,
                CommitOutput(upload_id=started.upload_id, run_id=owner),
            )
        assert await pg.fetchval("SELECT count(*) FROM outputs WHERE run_id = $1", owner) == 0
        digests = await pg.fetch(
            "SELECT digest FROM output_upload_parts WHERE upload_id = $1", started.upload_id
        )
        await pg.execute(
            "UPDATE output_uploads SET expires_at = now() WHERE upload_id = $1",
            started.upload_id,
        )
        objects = bucket_of(pbus, backend)
        engine = make_engine(database_url, pool_size=1)
        try:
            bucket = BlobBucket(pbus, pbus.subjects.output_bucket)
            gc = Collector(
                engine, grace=timedelta(0), keep_tombstones=timedelta(days=1), objects=bucket
            )
            # Waits out a pass of the restarted store's own collector, which holds the
            # lock; whichever pass saw the upload expired removed it (the store's own
            # may run after the expiry above), so what is checked is that it is gone.
            await gc.collect(wait=True)
            assert not await pg.fetchval(
                "SELECT count(*) FROM output_uploads WHERE upload_id = $1", started.upload_id
            )
        finally:
            await engine.dispose()
        left = await pg.fetchval(
            "SELECT count(*) FROM output_chunks WHERE digest = ANY($1::varchar[])",
            [r["digest"] for r in digests],
        )
        assert left == 0
        if objects is not None:  # the chunk objects went with their rows
            assert not [r["digest"] for r in digests if await objects.exists(r["digest"])]
    finally:
        await pg.close()


async def test_tether_outputs_download(
    store_process: Supervisor,
    pbus: Bus,
    owner: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = hex_lines(owner, 3 * MIB + 17)
    _, ref = await maybe_offload(pbus, owner, "shell", data, threshold=4096)
    assert ref is not None
    monkeypatch.setenv("TETHER_OUTPUTS_URL", store_process.child("output-store").url)
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", TOKEN)
    target = tmp_path / "out.log"
    assert await asyncio.to_thread(main, ["outputs", "download", ref, "-o", str(target)]) == 0
    assert target.read_bytes() == data
    assert await asyncio.to_thread(main, ["outputs", "download", "out_missing"]) == 5  # not found
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", "wrong")
    assert await asyncio.to_thread(main, ["outputs", "download", ref, "-o", str(target)]) == 4
