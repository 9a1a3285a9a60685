"""The floor of one step: two nats-py request/reply round trips to two other Python
processes plus one durable PostgreSQL commit, done the plainest way."""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg
import nats


async def spawn_echo(url: str, subject: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.echo", url, subject, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    await proc.stdout.readline()
    return proc


async def measure_floor(nats_url: str, pg_url: str, n: int) -> tuple[list[float], list[float]]:
    """Returns (one round trip, full floor step) samples in milliseconds."""
    a, b = await spawn_echo(nats_url, "floor.a"), await spawn_echo(nats_url, "floor.b")
    nc = await nats.connect(nats_url)
    pg = await asyncpg.connect(pg_url)
    await pg.execute(
        "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial primary key, data jsonb)"
    )
    payload = b'{"x": "' + b"y" * 200 + b'"}'
    round_trips, steps = [], []
    try:
        for _ in range(50):  # warm-up
            await nc.request("floor.a", payload, timeout=5)
        for _ in range(n):
            started = time.perf_counter()
            await nc.request("floor.a", payload, timeout=5)
            middle = time.perf_counter()
            await nc.request("floor.b", payload, timeout=5)
            async with pg.transaction():
                await pg.execute("INSERT INTO bench_floor (data) VALUES ($1)", payload.decode())
            ended = time.perf_counter()
            round_trips.append((middle - started) * 1000)
            steps.append((ended - started) * 1000)
    finally:
        await nc.close()
        await pg.close()
        for proc in (a, b):
            proc.kill()
            await proc.wait()
    return round_trips, steps
