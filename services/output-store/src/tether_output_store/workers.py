"""Running a query over a stored output in a child process (`python -m MODULE SPEC PID`,
the output streamed to its stdin, JSON records read from its stdout) under a time budget
and a cap on how many run at once: a model-supplied pattern or path can then cost
neither the service's event loop nor its memory, and a runaway one is killed. A worker
dies with the service, however the service dies: it arms itself first thing
(`lifeline.arm` with the service's PID), which keeps the spawn a cheap vfork.

A worker first writes `READY` once its imports are done; the budget starts then, so it
bounds the query, not the interpreter's start (which a loaded machine can make slow)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import aclosing, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether_common import lifeline

if TYPE_CHECKING:  # the workers import `READY` from here: keep them from the database code
    from tether_output_store.store import OutputStore, StoredOutput

READY = b'{"ready": true}\n'
# How long a worker may take to start (import its modules) before it counts as failed.
START_S = 60.0


def worker_spec() -> dict[str, Any]:
    """A worker's first step: tie itself to the service that started it, then read the
    SPEC it was given."""
    lifeline.arm(int(sys.argv[2]))
    spec: dict[str, Any] = json.loads(sys.argv[1])
    return spec


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """What a worker wrote before it ended or was stopped."""

    records: list[dict[str, Any]]
    timed_out: bool


async def feed(proc: asyncio.subprocess.Process, store: OutputStore, stored: StoredOutput) -> None:
    assert proc.stdin is not None
    try:
        async with aclosing(store.iter_chunks(stored)) as pieces:
            async for piece in pieces:
                proc.stdin.write(piece)
                await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker died or was killed; the reader reports it


async def collect(proc: asyncio.subprocess.Process, records: list[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        records.append(json.loads(line))


async def run_worker(
    module: str,
    spec: dict[str, Any],
    store: OutputStore,
    stored: StoredOutput,
    *,
    budget_s: float,
    slots: asyncio.Semaphore,
) -> WorkerRun:
    """Run `module` over `stored`; past `budget_s` it is killed (`timed_out`)."""
    async with slots:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, json.dumps(spec), str(os.getpid()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        records: list[dict[str, Any]] = []
        timed_out = False
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(START_S):
                ready = await proc.stdout.readline()
            if ready != READY:
                raise RuntimeError(f"{module} did not start: {ready[:200]!r}")
            async with asyncio.timeout(budget_s), asyncio.TaskGroup() as group:
                group.create_task(feed(proc, store, stored))
                group.create_task(collect(proc, records))
        except TimeoutError:
            timed_out = True
        finally:
            with suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    return WorkerRun(records, timed_out)
