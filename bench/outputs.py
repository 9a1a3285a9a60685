"""Output-store throughput, for each backend (chunk bytes in PostgreSQL or in the JetStream
object store): offload (chunked upload + verify at commit + digest) and page-back
(retrieve pages over the bus, and the operator's HTTP download), against a raw PostgreSQL
large-row write of the same bytes measured in the same run.

    await measure_outputs(nats_url, pg_url, size_mib=100)   # prints MB/s lines
    python -m bench.outputs --size-mib 100                   # own NATS + PostgreSQL
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from tether_client.server.embedded import EmbeddedPostgres, NatsServer
from tether_client.server.supervisor import SERVICES, Supervisor
from tether_common.bus import Bus
from tether_common.messages.outputs import QueryOutput
from tether_common.subjects import Subjects
from tether_tools_runner.offload import maybe_offload

MIB = 1024 * 1024
ROW_BYTES = 256 * 1024  # the store's default chunk size: the same rows as the floor
TOKEN = "bench-operator-token"
BACKENDS = ("postgres", "jetstream")


def sample(size: int) -> bytes:
    """Log-like text (64-character hex lines): compressible the way real output is."""
    raw = hashlib.shake_256(b"bench").digest(size // 2).hex().encode()
    return b"\n".join(raw[i : i + 64] for i in range(0, size, 65))[:size]


def rate(label: str, size: int, seconds: float) -> float:
    mbs = size / seconds / 1e6
    print(f"{label:52} {size / MIB:7.1f} MiB in {seconds:6.2f} s  {mbs:8.1f} MB/s")
    return mbs


async def raw_pg_write(pg_url: str, data: bytes, *, storage: str) -> float:
    """The floor: the same bytes as bytea rows in one transaction, plain asyncpg.
    `storage` EXTENDED is PostgreSQL's default (pglz-compressed TOAST); EXTERNAL is
    uncompressed TOAST, what the output-store's chunk table uses."""
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_blob (id bigserial, data bytea)")
        await conn.execute(f"ALTER TABLE bench_blob ALTER COLUMN data SET STORAGE {storage}")
        rows = [(data[i : i + ROW_BYTES],) for i in range(0, len(data), ROW_BYTES)]
        started = time.perf_counter()
        async with conn.transaction():
            await conn.executemany("INSERT INTO bench_blob (data) VALUES ($1)", rows)
        elapsed = time.perf_counter() - started
        await conn.execute("DROP TABLE bench_blob")
    finally:
        await conn.close()
    return rate(f"raw PostgreSQL write (asyncpg, 256 KiB rows, {storage})", len(data), elapsed)


async def page_back(bus: Bus, ref: str, run_id: str, size: int, backend: str) -> float:
    started, offset, got = time.perf_counter(), 0, 0
    while True:
        query = QueryOutput(ref=ref, run_id=run_id, mode="bytes", offset=offset, limit=512 * 1024)
        page = await bus.request(bus.subjects.output_query, query, timeout=30)
        got += len(page.content)
        if page.next_offset is None:
            break
        offset = page.next_offset
    assert got == size, (got, size)
    return rate(
        f"[{backend}] page-back: retrieve pages over NATS (512 KiB)",
        size,
        time.perf_counter() - started,
    )


async def download(url: str, size: int, backend: str) -> float:
    started, got = time.perf_counter(), 0
    async with (
        httpx.AsyncClient(timeout=120) as client,
        client.stream("GET", url, headers={"Authorization": f"Bearer {TOKEN}"}) as response,
    ):
        async for piece in response.aiter_bytes():
            got += len(piece)
    assert got == size
    return rate(
        f"[{backend}] page-back: operator HTTP download (streamed)",
        size,
        time.perf_counter() - started,
    )


async def measure_backend(
    nats_url: str, pg_url: str, data: bytes, backend: str, log_dir: Path | None
) -> dict[str, float]:
    """Offload and page-back through an output-store process keeping chunks in `backend`."""
    prefix = f"b{uuid.uuid4().hex[:10]}"
    env = {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": pg_url,
        "TETHER_SUBJECT_PREFIX": prefix,
        "TETHER_OPERATOR_TOKEN": TOKEN,
        "TETHER_LOG_LEVEL": "WARNING",
        "TETHER_OUTPUTS_BACKEND": backend,
    }
    spec = next(s for s in SERVICES if s.name == "output-store")
    supervisor = Supervisor(env, specs=(spec,), restart=False, log_dir=log_dir)
    bus = await Bus.connect(nats_url, service="bench", subjects=Subjects(prefix))
    results: dict[str, float] = {}
    try:
        await supervisor.start()
        await supervisor.wait_ready()
        started = time.perf_counter()
        _, ref = await maybe_offload(bus, "run_bench", "shell", data, threshold=4096)
        results["offload"] = rate(f"[{backend}] offload (chunks over NATS, verify, digest)",
                                  len(data), time.perf_counter() - started)  # fmt: skip
        assert ref is not None
        results["page_back"] = await page_back(bus, ref, "run_bench", len(data), backend)
        url = f"{supervisor.child('output-store').url}/v1/outputs/{ref}"
        results["download"] = await download(url, len(data), backend)
    finally:
        await bus.close()
        await supervisor.stop()
    return results


async def measure_outputs(
    nats_url: str, pg_url: str, *, size_mib: int = 100, log_dir: Path | None = None
) -> dict[str, float]:
    """Print MB/s figures for each backend against the raw PostgreSQL write floor."""
    data = sample(size_mib * MIB)
    results = {
        "raw_pg_write_compressed": await raw_pg_write(pg_url, data, storage="EXTENDED"),
        "raw_pg_write": await raw_pg_write(pg_url, data, storage="EXTERNAL"),
    }
    for backend in BACKENDS:
        measured = await measure_backend(nats_url, pg_url, data, backend, log_dir)
        results.update({f"{key}_{backend}": value for key, value in measured.items()})
    for backend in BACKENDS:
        ratio = results[f"offload_{backend}"] / results["raw_pg_write"]
        print(f"[{backend}] offload / raw PostgreSQL write (same storage): {ratio:.2f}x")
    return results


async def main(size_mib: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tether-bench-outputs-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        nats = NatsServer(base / "nats").start()
        pg = EmbeddedPostgres(base / "pg").start()
        try:
            await measure_outputs(nats.url, pg.url, size_mib=size_mib, log_dir=base / "logs")
        finally:
            pg.stop()
            nats.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=100)
    asyncio.run(main(parser.parse_args().size_mib))
