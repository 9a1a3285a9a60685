"""One function per `python -m bench` sub-command. Each starts its own servers and
services, prints its figures, and leaves the headline numbers in `results` for the
closing summary (ratios are only taken between figures of the same invocation)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.chaos import Partitions, chaos_env, measure_chaos
from bench.cpuquota import quotas
from bench.floor import measure_floor
from bench.loop import LONG_ENV, measure_concurrency, measure_long, measure_resume
from bench.outputs import measure_outputs
from bench.parked import PARK_ENV, measure_approvals, measure_parked
from bench.runner import RUNNER_SPECS, measure_runner
from bench.scaling import BRAIN_CORES, measure_scaling
from bench.shellfuzz import print_report
from bench.shellfuzz import run as run_shellfuzz
from bench.skeleton import measure_steps
from bench.stack import Stack, servers, services, stack
from bench.stats import line, summary
from bench.targets import rows, table, write_markdown

Results = dict[str, float]


@dataclass(frozen=True, slots=True)
class Counts:
    """How much each sub-command does; `--quick` scales them down."""

    floor_samples: int = 1000
    loop_steps: int = 2000
    long_steps: int = 500
    parked: int = 10_000
    approvals_parked: int = 1000
    decisions: int = 200
    langgraph_steps: int = 1000
    langgraph_long: int = 300
    runner_calls: int = 2000
    shell_calls: int = 100
    outputs_mib: int = 100
    scaling_runs: int = 100
    shellfuzz_commands: int = 10_000
    chaos_kills: int = 100
    partition_rounds: int = 10


QUICK = Counts(300, 1000, 500, 2000, 1000, 100, 500, 0, 500, 40, 20, 50, 3000, 10, 2)


async def floor(counts: Counts, results: Results) -> None:
    """The bus floor and the skeleton step (issue 2)."""
    async with servers("floor") as srv:
        round_trip, floor_ms = await measure_floor(srv.nats_url, srv.pg.url, counts.floor_samples)
        async with services(srv) as s:
            steps = await measure_steps(s.api_url, s.scripts, max(1, counts.floor_samples // 19))
    print(line("nats-py request/reply round trip", round_trip))
    print(line("floor: 2 round trips + 1 durable commit", floor_ms))
    print(line("skeleton step (brain→gateway→runner→PG)", steps))
    (fm, fp), (sm, sp) = summary(floor_ms), summary(steps)
    print(f"ratio skeleton/floor: median {sm / fm:.2f}x  p99 {sp / fp:.2f}x  (target ≤ 1.5x)")
    results["floor_ms"] = fm


async def loop_floor(counts: Counts, results: Results, parts: set[str]) -> None:
    """The floor on fresh servers before the services start (for the ratio), then the
    loop benchmarks in `parts` on one stack with the step ceiling raised."""
    async with servers("loop") as srv:
        if "concurrency" in parts:
            _, floor_ms = await measure_floor(srv.nats_url, srv.pg.url, counts.floor_samples)
            results["floor_ms"] = summary(floor_ms)[0]
            print(line("floor: 2 round trips + 1 durable commit", floor_ms))
        async with services(srv, LONG_ENV) as s:
            await on_loop_stack(s, counts, results, parts)


async def on_loop_stack(s: Stack, counts: Counts, results: Results, parts: set[str]) -> None:
    if "concurrency" in parts:
        batches = await measure_concurrency(s, counts.loop_steps)
        for level, batch in batches.items():
            results[f"tether_{level}_steps_per_s"] = batch.steps_per_s
        for name, ms in batches[50].cpu_ms.items():
            results[f"cpu_ms_per_step_50_{name}"] = ms
        results["tether_1_step_ms"] = summary(batches[1].per_step_ms)[0]
        ratio = results["tether_1_step_ms"] / results["floor_ms"]
        print(f"step at 1 in flight / floor (medians): {ratio:.2f}x  (target: the summary)")
    if "long" in parts:
        head, tail = await measure_long(s, counts.long_steps)
        results["long_growth"] = tail / head
    if "resume" in parts:
        await measure_resume(s)


async def loop(counts: Counts, results: Results) -> None:
    """Concurrency (with the floor for the ratio), the long run and resume, one stack."""
    await loop_floor(counts, results, {"concurrency", "long", "resume"})


async def concurrency(counts: Counts, results: Results) -> None:
    await loop_floor(counts, results, {"concurrency"})


async def long(counts: Counts, results: Results) -> None:
    await loop_floor(counts, results, {"long"})


async def resume(counts: Counts, results: Results) -> None:
    await loop_floor(counts, results, {"resume"})


async def parked(counts: Counts, results: Results) -> None:
    async with stack("parked", PARK_ENV) as s:
        await measure_parked(s, counts.parked)


async def approvals(counts: Counts, results: Results) -> None:
    async with stack("approvals", PARK_ENV) as s:
        back_to_back, alone = await measure_approvals(s, counts.approvals_parked, counts.decisions)
    results["decision_result_p99_ms"] = summary(back_to_back)[1]
    results["decision_alone_result_p99_ms"] = summary(alone)[1]


async def langgraph(counts: Counts, results: Results) -> None:
    # Imported here: LangGraph is in the `bench` dependency group only (`make bench` adds
    # it); every other sub-command runs without it.
    from bench.baseline_langgraph import measure_langgraph

    async with servers("langgraph") as srv:
        pg = srv.pg
        graphs = await measure_langgraph(
            pg.url, (1, 50), counts.langgraph_steps, counts.langgraph_long
        )
    for (durability, level), batch in graphs.items():
        results[f"langgraph_{durability}_{level}_steps_per_s"] = batch.steps_per_s
    results["langgraph_sync_1_step_ms"] = summary(graphs["sync", 1].per_step_ms)[0]


async def runner(counts: Counts, results: Results) -> None:
    async with stack("runner", specs=RUNNER_SPECS) as s:
        await measure_runner(s, counts.runner_calls, counts.shell_calls)


async def outputs(counts: Counts, results: Results) -> None:
    async with servers("outputs") as srv:
        await measure_outputs(
            srv.nats_url, srv.pg.url, size_mib=counts.outputs_mib, log_dir=srv.base / "logs"
        )


async def scaling(counts: Counts, results: Results) -> None:
    # The groups are made before the stack starts (a host without them fails at once)
    # and removed after it stops (a group is removed once its processes are gone).
    with quotas(BRAIN_CORES) as held:
        async with stack("scaling") as s:
            batches = await measure_scaling(s, held, counts.scaling_runs, 10)
    for replicas, batch in batches.items():
        results[f"scaling_{replicas}_steps_per_s"] = batch.steps_per_s


async def shellfuzz(counts: Counts, results: Results) -> None:
    """The shell classifier against the sandbox (issue 13): allowed commands with effects."""
    report = await asyncio.to_thread(run_shellfuzz, counts.shellfuzz_commands, 13)
    print_report(report)
    results["shellfuzz_effects"] = float(len(report.effects))
    if report.effects:
        raise RuntimeError(f"{len(report.effects)} allowed commands had effects")


async def chaos(counts: Counts, results: Results) -> None:
    """Brain replicas SIGKILLed under load (issue 15), then network partitions."""
    async with servers("chaos") as srv:
        ledger = srv.base / "effects-ledger.txt"
        # Long runs of many processes meet a busy machine: a generous start.
        async with services(srv, chaos_env(ledger), ready_timeout=300) as s:
            await measure_chaos(s, ledger, counts.chaos_kills, results)
    if (partitions := partitions_suite()) is None:
        print("partitions: bench/partitions.py is not there; skipped")
        return
    print("\n-- network partitions --", flush=True)
    await partitions(counts.partition_rounds, results)


def partitions_suite() -> Partitions | None:
    """`bench.partitions.measure_partitions` when that module exists (it needs root for
    network namespaces and is written apart from the kills)."""
    try:
        module = importlib.import_module("bench.partitions")
    except ModuleNotFoundError as exc:
        if exc.name != "bench.partitions":
            raise
        return None
    found: Partitions = module.measure_partitions
    return found


async def models(counts: Counts, results: Results) -> None:
    """Small models finishing everyday tasks (issue 20): Tether against a plain loop."""
    # Imported here: it needs llama.cpp and the evaluation model, which no other needs.
    from bench.models import measure_models

    await measure_models(results)


Suite = Callable[[Counts, Results], Awaitable[None]]

SUITES: dict[str, Suite] = {
    "floor": floor,
    "loop": loop,
    "concurrency": concurrency,
    "long": long,
    "resume": resume,
    "parked": parked,
    "approvals": approvals,
    "langgraph": langgraph,
    "runner": runner,
    "outputs": outputs,
    "scaling": scaling,
    "shellfuzz": shellfuzz,
    "models": models,
    "chaos": chaos,
}

# What `all` (and `make bench`) runs: `loop` covers concurrency, long and resume.
ALL = ("floor", "loop", "langgraph", "parked", "approvals", "runner", "outputs", "scaling")


def print_summary(results: Results, loads: list[float]) -> None:
    """Issue 33's table from this invocation's figures (`bench.targets`), printed and
    written as markdown for docs/benchmarks.md."""
    found = rows(results)
    print("\n== summary (targets of issue 33) ==")
    print(table(found))
    print(f"markdown for docs/benchmarks.md: {write_markdown(found, loads)}")
