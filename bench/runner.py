"""Tools-runner throughput (issue 5): trivial tool calls per second over the bus with 1
and 50 in flight, and shell calls per second inside the sandbox.

Calls go straight onto `subjects.tool_execute` as `ExecuteTool` messages, the way the
brain sends them, so the runner's own re-checks run but no brain gate does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from bench.stack import Stack
from bench.stats import line
from tether_client.server.supervisor import SERVICES
from tether_common.bus import Bus
from tether_common.messages.tools import CatalogRequest, ExecuteTool
from tether_common.subjects import Subjects

RUNNER_SPECS = tuple(s for s in SERVICES if s.name in ("output-store", "tools-runner"))


async def calls(
    bus: Bus, name: str, args: list[dict[str, Any]], in_flight: int
) -> tuple[float, list[float]]:
    """Run one call per `args` entry with at most `in_flight` at once; (calls/s, latencies)."""
    gate = asyncio.Semaphore(in_flight)
    latencies: list[float] = []

    async def one(arguments: dict[str, Any]) -> None:
        async with gate:
            body = ExecuteTool(
                run_id="run_bench", call_id=uuid.uuid4().hex[:12], name=name, args=arguments
            )
            started = time.perf_counter()
            result = await bus.request(bus.subjects.tool_execute, body, timeout=60)
            latencies.append((time.perf_counter() - started) * 1000)
            assert result.ok, result.content

    started = time.perf_counter()
    await asyncio.gather(*(one(a) for a in args))
    return len(args) / (time.perf_counter() - started), latencies


async def measure_runner(stack: Stack, count: int, shell_count: int) -> None:
    bus = await Bus.connect(stack.nats_url, service="bench", subjects=Subjects())
    try:
        catalog = await bus.request(bus.subjects.tool_catalog, CatalogRequest())
        expressions = [{"expression": f"{i} + 1"} for i in range(count)]
        await calls(bus, "calculate", expressions[:50], 10)  # warm-up
        for in_flight in (1, 50):
            rate, latencies = await calls(bus, "calculate", expressions, in_flight)
            print(line(f"calculate, {in_flight:2} in flight: {rate:6.0f} calls/s", latencies))
        commands = [{"command": f"echo {i}"} for i in range(shell_count)]
        for in_flight in (1, 8):
            rate, latencies = await calls(bus, "shell", commands, in_flight)
            print(line(f"shell (echo), {in_flight} in flight: {rate:5.0f} calls/s", latencies))
        print(f"sandbox level: {catalog.sandbox_level}")
    finally:
        await bus.close()
