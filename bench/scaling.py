"""Scaling out (issue 9): runs and steps per second with one brain replica, then with
three on the same servers (one gateway and one tools-runner throughout), under the same
load; the HTTP starts are spread round-robin over the replicas, and any replica may
advance any run after that (decisions, takeovers)."""

from __future__ import annotations

from bench.cpu import cpu_report
from bench.loop import Batch, run_batch
from bench.stack import Stack
from bench.stats import summary


def report(replicas: int, batch: Batch) -> None:
    median, p99 = summary(batch.per_step_ms)
    print(
        f"{replicas:8} {batch.runs_per_s:7.1f} {batch.steps_per_s:8.0f}"
        f" {batch.steps_per_s / replicas:12.0f}  {median:7.2f} ms / {p99:7.2f} ms"
    )


async def measure_scaling(stack: Stack, runs: int, steps: int) -> dict[int, Batch]:
    """`runs` runs of `steps` steps, all started at once, on 1 and then 3 brains."""
    await run_batch(stack, 10, 10)  # warm-up
    print(f"load: {runs} runs of {steps} steps started at once (calculate each step)")
    print(
        f"{'replicas':>8} {'runs/s':>7} {'steps/s':>8} {'per replica':>12}  per-step median / p99"
    )
    with cpu_report(stack, "1 replica") as cores:
        results = {1: await run_batch(stack, runs, steps)}
    report(1, results[1])
    print(cores.text)
    print(cores.per(results[1].steps, "step"))
    added = [stack.supervisor.add_replica("brain") for _ in range(2)]
    for child in added:
        await stack.supervisor.start_child(child)
    await stack.supervisor.wait_ready(children=added)
    await run_batch(stack, 10, 10, stack.brain_urls())  # warm the new replicas
    with cpu_report(stack, "3 replicas") as cores:
        results[3] = await run_batch(stack, runs, steps, stack.brain_urls())
    report(3, results[3])
    print(cores.text)
    print(cores.per(results[3].steps, "step"))
    gain = results[3].steps_per_s / results[1].steps_per_s
    print(f"3 replicas / 1 replica: {gain:.2f}x steps/s")
    return results
