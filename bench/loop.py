"""The brain's loop under load (issue 3): steps/s and per-step time with 1…100 runs in
flight, step 1 against step 500 of one long run, and the resume time of a 100-step run.

Every run replays a scripted model (zero cost) that calls `calculate` once a step with a
different expression (so the identical-call cache never answers), through every gate,
the audit record, the journal commit and the JetStream events. Timings come from the
runs' own `step` event timestamps, read back from the journal.
"""

from __future__ import annotations

import asyncio
import bisect
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import psutil

from bench.cpu import cpu_report, processes
from bench.stack import Stack
from bench.stats import line, summary
from tether_brain.persistence.store import RunStore
from tether_client import TetherClient
from tether_common.db import make_engine
from tether_common.settings import async_database_url
from tether_common.testing import Turn, call, say, write_script

# The brain clamps max_steps to its ceiling (20); the loop benchmarks raise it.
LONG_ENV = {"TETHER_BRAIN_STEP_CEILING": "600"}


def calc_script(scripts: Path, steps: int) -> str:
    """`steps - 1` tool steps and an answer: a run of exactly `steps` steps. No call
    repeats an earlier result (`i + 1` after `i - 1 + 1 = i` would: the brain's
    finish-don't-loop guard then ends the run)."""
    turns: list[Turn] = [[call("calculate", expression=f"{i} + 1000000")] for i in range(steps - 1)]
    return write_script(scripts, [*turns, say("done")])


async def launch(urls: Sequence[str], model: str, runs: int, steps: int) -> list[str]:
    """Start `runs` runs at once, spread round-robin over the brain replicas' APIs."""
    clients = [TetherClient(url, timeout=120) for url in urls]
    try:
        started = await asyncio.gather(
            *(
                clients[i % len(clients)].start_run(
                    f"bench {i}", provider="scripted", model=model, max_steps=steps
                )
                for i in range(runs)
            )
        )
    finally:
        for client in clients:
            await client.close()
    return [s.run_id for s in started]


@dataclass(frozen=True, slots=True)
class Batch:
    runs: int
    steps: int
    seconds: float
    per_step_ms: list[float]
    # CPU ms per step by process group, where it was measured (`measure_concurrency`).
    cpu_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds


async def run_batch(
    stack: Stack, runs: int, steps: int, urls: Sequence[str] | None = None
) -> Batch:
    """`runs` runs of `steps` steps started together; wall time is first `run.start` to
    last `run.end`, as the brains stamped them."""
    model = calc_script(stack.scripts, steps)
    run_ids = await launch(urls or [stack.api_url], model, runs, steps)
    await stack.wait_status(run_ids)
    statuses = await stack.db.fetch(
        "SELECT status, count(*) AS n FROM runs WHERE run_id = ANY($1) GROUP BY status", run_ids
    )
    assert [(s["status"], s["n"]) for s in statuses] == [("completed", runs)], statuses
    marks = await stack.event_times(run_ids, "step")
    starts = await stack.event_times(run_ids, "run.start")
    ends = await stack.event_times(run_ids, "run.end")
    first = min(t[0] for t in starts.values())
    last = max(t[-1] for t in ends.values())
    per_step = [(b - a).total_seconds() * 1000 for ts in marks.values() for a, b in pairwise(ts)]
    total = sum(len(ts) for ts in marks.values())
    return Batch(runs, total, (last - first).total_seconds(), per_step)


CONCURRENCY = (1, 10, 50, 100)


async def level_batch(stack: Stack, level: int, total_steps: int) -> Batch:
    """About `total_steps` steps at `level` runs in flight, as short runs (20-40 steps, so
    the long-run growth stays out of it), in up to 10 rounds one after another."""
    steps = min(40, max(20, total_steps // level))
    rounds = min(10, max(1, total_steps // (level * steps)))
    batches = [await run_batch(stack, level, steps) for _ in range(rounds)]
    return Batch(
        sum(b.runs for b in batches),
        sum(b.steps for b in batches),
        sum(b.seconds for b in batches),
        [ms for b in batches for ms in b.per_step_ms],
    )


async def measure_concurrency(stack: Stack, total_steps: int) -> dict[int, Batch]:
    await run_batch(stack, 10, 20)  # warm-up: connections, catalogue, caches
    results: dict[int, Batch] = {}
    print(f"{'in flight':>9} {'runs':>5} {'steps':>6} {'steps/s':>8}  per-step median / p99")
    for level in CONCURRENCY:
        sessions, since = await sessions_opened(stack), await stack.db.fetchval("SELECT now()")
        with cpu_report(stack, f"{level} in flight") as cores:
            batch = await level_batch(stack, level, total_steps)
        sessions = await sessions_opened(stack) - sessions
        commits, transactions = await commits_since(stack, since)
        median, p99 = summary(batch.per_step_ms)
        print(
            f"{level:9} {batch.runs:5} {batch.steps:6} {batch.steps_per_s:8.0f}"
            f"  {median:7.2f} ms / {p99:7.2f} ms"
        )
        print(cores.text)
        print(cores.per(batch.steps, "step"))
        batch = replace(batch, cpu_ms=cores.ms_per(batch.steps))
        # A pool that closes and reopens connections pays a connect, authentication and
        # type look-ups each time, and prepares its statements again.
        print(f"  PostgreSQL sessions opened meanwhile: {sessions}")
        # Group commit puts the steps of the runs in flight into shared transactions.
        print(
            f"  step commits {commits} in {transactions} transactions"
            f" ({commits / max(transactions, 1):.1f} a transaction)"
        )
        results[level] = batch
    return results


async def sessions_opened(stack: Stack) -> int:
    """Sessions PostgreSQL has opened in the stack's database so far (PostgreSQL 14+)."""
    return int(
        await stack.db.fetchval(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        )
    )


async def commits_since(stack: Stack, since: datetime) -> tuple[int, int]:
    """Step commits journaled since `since`, and the transactions they took: rows of
    one commit share a run and a writing transaction (`xmin`)."""
    row = await stack.db.fetchrow(
        "SELECT count(DISTINCT (run_id, xmin::text)) AS commits, "
        "count(DISTINCT xmin::text) AS transactions FROM run_journal WHERE created_at >= $1",
        since,
    )
    return int(row["commits"]), int(row["transactions"])


async def measure_long(stack: Stack, steps: int = 500) -> tuple[float, float]:
    """One run of `steps` steps: step 1 (from `run.start`), the first 50 and the last 50;
    the CPU each service spent on them, and the history the model request carries."""
    model = calc_script(stack.scripts, steps)
    groups = {name: procs for name, procs in processes(stack).items() if name in COSTED}
    samples: list[tuple[datetime, dict[str, float]]] = []
    sampling = asyncio.create_task(sample_cpu(groups, samples))
    try:
        (run_id,) = await launch([stack.api_url], model, 1, steps)
        await stack.wait_status([run_id])
    finally:
        sampling.cancel()
    marks = (await stack.event_times([run_id], "step"))[run_id]
    assert len(marks) == steps, len(marks)
    start = (await stack.event_times([run_id], "run.start"))[run_id][:1]
    gaps = [(b - a).total_seconds() * 1000 for a, b in pairwise(start + marks)]
    head, tail = statistics.median(gaps[:50]), statistics.median(gaps[-50:])
    print(line("long run: step 1 (n=1)", gaps[:1]))
    print(line(f"long run: step {steps} (n=1)", gaps[-1:]))
    print(line("long run: steps 1-50", gaps[:50]))
    print(line(f"long run: steps {steps - 49}-{steps}", gaps[-50:]))
    print(f"long run: last 50 / first 50 (medians): {tail / head:.2f}x  (target: the summary)")
    print_cpu_growth(samples, start + marks)
    await print_history_bytes(stack, run_id)
    await print_phases(stack, run_id)
    return head, tail


# The services whose CPU a step's cost is read from (the brain's is the target's: "flat
# with history"; the gateway's grows with the request it parses).
COSTED = ("brain", "gateway", "tools-runner")
SAMPLE_S = 0.01


async def sample_cpu(
    groups: dict[str, list[psutil.Process]], into: list[tuple[datetime, dict[str, float]]]
) -> None:
    """CPU seconds of each group, user and system apart ("brain (system)": the kernel's
    share, sending and receiving on its sockets), every SAMPLE_S, until cancelled."""
    while True:
        sample: dict[str, float] = {}
        for name, procs in groups.items():
            for part in ("user", "system"):
                sample[f"{name} ({part})"] = sum(_cpu(p, part) for p in procs)
        into.append((datetime.now(UTC), sample))
        await asyncio.sleep(SAMPLE_S)


def _cpu(proc: psutil.Process, part: str) -> float:
    try:
        return float(getattr(proc.cpu_times(), part))
    except psutil.NoSuchProcess:
        return 0.0


def print_cpu_growth(
    samples: list[tuple[datetime, dict[str, float]]], marks: list[datetime]
) -> None:
    """CPU ms per step of each service over the first and the last 50 steps, read off the
    samples at those steps' event times (the run is alone on the stack: what the services
    spend meanwhile is its steps'; CPU times tick every 10 ms, so ±0.2 ms a step)."""
    if len(marks) < 101 or len(samples) < 2:
        return
    times = [t for t, _ in samples]

    def at(when: datetime, name: str) -> float:
        i = min(max(bisect.bisect_left(times, when), 1), len(samples) - 1)
        (t0, a), (t1, b) = samples[i - 1], samples[i]
        span = (t1 - t0).total_seconds() or 1.0
        share = min(max((when - t0).total_seconds() / span, 0.0), 1.0)
        return a[name] + (b[name] - a[name]) * share

    print("  CPU ms per step         first 50   last 50   ratio")
    for name in samples[0][1]:
        first = (at(marks[50], name) - at(marks[0], name)) * 1000 / 50
        last = (at(marks[-1], name) - at(marks[-51], name)) * 1000 / 50
        print(f"  {name:22} {first:8.2f}  {last:8.2f}  {last / first if first else 0:6.2f}x")


async def print_history_bytes(stack: Stack, run_id: str) -> None:
    """The history the model request carries (its messages' JSON), at the first and the
    last step: what grows with the run whatever the services do."""
    sizes = await stack.db.fetch(
        "SELECT sum(octet_length(data::text)) FILTER (WHERE kind = 'message') "
        "OVER (ORDER BY seq) AS carried, kind, data->>'kind' AS event FROM run_journal "
        "WHERE run_id = $1 ORDER BY seq",
        run_id,
    )
    at_steps = [r["carried"] or 0 for r in sizes if r["kind"] == "event" and r["event"] == "step"]
    if at_steps:
        first, last = at_steps[0], at_steps[-1]
        print(
            f"  history in the model request: step 1 {first / 1024:.1f} KiB, "
            f"step {len(at_steps)} {last / 1024:.1f} KiB ({last / max(first, 1):.0f}x)"
        )


async def print_phases(stack: Stack, run_id: str) -> None:
    """Where a step's time goes and which part grows: the gaps between consecutive events
    by their kinds, over the first and the last 50 steps. A step's commit and publish and
    the next model turn fall in `step → tool.call`."""
    rows = await stack.db.fetch(
        "SELECT data->>'kind' AS kind, data->>'ts' AS ts FROM run_journal "
        "WHERE run_id = $1 AND kind = 'event' ORDER BY seq",
        run_id,
    )
    gaps: dict[str, list[float]] = {}
    for a, b in pairwise(rows):
        gap = datetime.fromisoformat(b["ts"]) - datetime.fromisoformat(a["ts"])
        gaps.setdefault(f"{a['kind']} → {b['kind']}", []).append(gap.total_seconds() * 1000)
    print("  between events (median ms)      first 50   last 50")
    for pair, values in gaps.items():
        if len(values) >= 100:
            head, tail = statistics.median(values[:50]), statistics.median(values[-50:])
            print(f"  {pair:32} {head:8.2f}  {tail:8.2f}")


async def measure_resume(stack: Stack, steps: int = 100, samples: int = 50) -> None:
    """A finished 100-step run read back: over HTTP, and with the brain's own
    `RunStore.load` (what a replica does when it takes a run over)."""
    model = calc_script(stack.scripts, steps)
    (run_id,) = await launch([stack.api_url], model, 1, steps)
    await stack.wait_status([run_id])
    async with TetherClient(stack.api_url) as client:
        http = await timed(samples, lambda: client.get_run(run_id))
    # The brain's own driver (asyncpg): a plain postgresql:// URL would get psycopg.
    engine = make_engine(async_database_url(stack.pg_url), pool_size=2)
    try:
        store = RunStore(engine)
        loads = await timed(samples, lambda: store.load(run_id))
        journal = await stack.db.fetchval(
            "SELECT count(*) FROM run_journal WHERE run_id = $1", run_id
        )
    finally:
        await engine.dispose()
    print(line(f"resume: GET /v1/runs/{{id}} ({steps} steps)", http))
    print(line(f"resume: RunStore.load ({journal} journal rows)", loads))


async def timed(samples: int, action: Callable[[], Awaitable[object]]) -> list[float]:
    await action()  # warm-up
    out = []
    for _ in range(samples):
        started = time.perf_counter()
        await action()
        out.append((time.perf_counter() - started) * 1000)
    return out
