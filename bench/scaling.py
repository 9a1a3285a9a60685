"""Scaling out (issues 9 and 33): steps per second with one brain replica, then with
three on the same servers (one gateway and one tools-runner throughout), under the same
load, each replica held to the same CPU share by a cgroup quota of its own
(`bench.cpuquota`; the rest of the system unconstrained), so that a 2-core machine shows
what each replica adds as if it had a share of its own. The HTTP starts are spread
round-robin over the replicas; any replica may advance any run after that."""

from __future__ import annotations

from bench.cpu import cpu_report
from bench.cpuquota import Quotas
from bench.loop import Batch, run_batch
from bench.stack import Stack
from bench.stats import summary
from tether_client.server.supervisor import Child

# Each replica's share: three of them (0.9) leave the gateway, runner, PostgreSQL and
# NATS most of a second core on a 2-core machine.
BRAIN_CORES = 0.3


def report(replicas: int, batch: Batch) -> None:
    median, p99 = summary(batch.per_step_ms)
    print(
        f"{replicas:8} {batch.runs_per_s:7.1f} {batch.steps_per_s:8.0f}"
        f" {batch.steps_per_s / replicas:12.0f}  {median:7.2f} ms / {p99:7.2f} ms"
    )


def hold(quotas: Quotas, brains: list[Child]) -> None:
    """Each brain in a quota group of its own."""
    for child in brains:
        assert child.proc is not None, f"{child.label} is not running"
        quotas.hold(child.label, child.proc.pid)


def print_throttling(quotas: Quotas, before: dict[str, int]) -> None:
    """How often each group hit its quota meanwhile: the share held, seen from the kernel."""
    parts = []
    for name, group in quotas.groups.items():
        found = group.throttling()
        parts.append(f"{name} {found.throttled - before.get(name, 0)}")
    print(f"  periods throttled at {quotas.cores} of a core each: {'  '.join(parts)}")


async def measured(stack: Stack, quotas: Quotas, replicas: int, runs: int, steps: int) -> Batch:
    urls = stack.brain_urls()
    await run_batch(stack, 10, 10, urls)  # warm-up (the new replicas' pools and caches)
    before = {name: g.throttling().throttled for name, g in quotas.groups.items()}
    with cpu_report(stack, f"{replicas} replica{'s' if replicas > 1 else ''}") as cores:
        batch = await run_batch(stack, runs, steps, urls)
    report(replicas, batch)
    print(cores.text)
    print(cores.per(batch.steps, "step"))
    print_throttling(quotas, before)
    return batch


async def measure_scaling(stack: Stack, quotas: Quotas, runs: int, steps: int) -> dict[int, Batch]:
    """`runs` runs of `steps` steps, all started at once, on 1 and then 3 brains, each
    brain held to `quotas.cores` of a core."""
    hold(quotas, [c for c in stack.supervisor.children if c.spec.name == "brain"])
    print(f"load: {runs} runs of {steps} steps started at once (calculate each step)")
    print(f"each brain replica held to {quotas.cores} of a core ({quotas.base})")
    print(
        f"{'replicas':>8} {'runs/s':>7} {'steps/s':>8} {'per replica':>12}  per-step median / p99"
    )
    results = {1: await measured(stack, quotas, 1, runs, steps)}
    added = [stack.supervisor.add_replica("brain") for _ in range(2)]
    for child in added:
        await stack.supervisor.start_child(child)
    await stack.supervisor.wait_ready(children=added)
    hold(quotas, added)
    results[3] = await measured(stack, quotas, 3, runs, steps)
    gain = results[3].steps_per_s / results[1].steps_per_s
    print(f"3 replicas / 1 replica: {gain:.2f}x steps/s")
    return results
