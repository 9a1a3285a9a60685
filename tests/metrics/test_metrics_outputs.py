"""The output-store counts offloaded bytes once an output is committed (put or upload)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

import tether_output_store
from tether_common.db import make_engine, migrate
from tether_common.errors import ConflictError
from tether_common.messages.outputs import BeginOutput, OutputChunk
from tether_output_store.store import OutputStore
from tether_output_store.uploads import Uploads

Sum = Callable[..., float]
OFFLOADED = "tether.outputs.offloaded"


@pytest.fixture(scope="module")
async def store(own_database_url: str) -> AsyncIterator[OutputStore]:
    engine = make_engine(own_database_url, pool_size=2)
    migrations = Path(tether_output_store.__file__).parent / "migrations"
    await migrate(engine, migrations, "alembic_output_store")
    try:
        yield OutputStore(engine, chunk_bytes=1024, retention=timedelta(hours=1))
    finally:
        await engine.dispose()


async def test_a_put_counts_its_bytes(store: OutputStore, metric_sum: Sum) -> None:
    before = metric_sum(OFFLOADED)
    stored = await store.put("r_metrics", b"x" * 3000, "text/plain")
    assert stored.size == 3000
    assert metric_sum(OFFLOADED) == before + 3000


async def test_an_upload_counts_once_committed_and_never_when_refused(
    store: OutputStore, metric_sum: Sum
) -> None:
    uploads = Uploads(store, ttl=timedelta(minutes=5))
    data = b"line\n" * 500
    digest = hashlib.sha256(data).hexdigest()
    upload_id, size, count = await uploads.begin(
        BeginOutput(run_id="r_metrics", size=len(data), sha256=digest)
    )
    before = metric_sum(OFFLOADED)
    for seq in range(count):
        piece = base64.b64encode(data[seq * size : (seq + 1) * size]).decode()
        await uploads.chunk(OutputChunk(upload_id=upload_id, seq=seq, data=piece))
    assert metric_sum(OFFLOADED) == before  # chunks are not an output yet

    await uploads.commit(upload_id, "r_metrics")
    assert metric_sum(OFFLOADED) == before + len(data)

    wrong = "0" * 64
    bad_id, _, _ = await uploads.begin(BeginOutput(run_id="r_metrics", size=4, sha256=wrong))
    await uploads.chunk(
        OutputChunk(upload_id=bad_id, seq=0, data=base64.b64encode(b"abcd").decode())
    )
    with pytest.raises(ConflictError):
        await uploads.commit(bad_id, "r_metrics")
    assert metric_sum(OFFLOADED) == before + len(data)
