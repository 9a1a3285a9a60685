"""The runner records each call's duration by tool, next to its count by tool and outcome."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from tether_common.messages.tools import ExecuteTool, ToolDescriptor
from tether_tools_runner.executor import Executor
from tether_tools_runner.tool import Registry, Tool, ToolFailure

Sum = Callable[..., float]
Histogram = Callable[..., tuple[int, float]]
OPEN = {"type": "object", "properties": {}, "additionalProperties": False}


def execute(name: str) -> ExecuteTool:
    return ExecuteTool(run_id="r_metrics", call_id=f"c_{uuid.uuid4().hex[:8]}", name=name, args={})


async def test_a_call_records_its_duration_and_outcome(
    metric_sum: Sum, metric_histogram: Histogram
) -> None:
    name = f"nap_{uuid.uuid4().hex[:6]}"

    async def nap(args: dict[str, Any]) -> str:
        await asyncio.sleep(0.05)
        return "rested"

    tool = Tool(ToolDescriptor(name=name, description="naps", parameters=OPEN), nap)
    executor = Executor(Registry([tool]), default_timeout_s=5)

    results = [await executor.execute(execute(name)) for _ in range(2)]

    assert all(r.ok for r in results)
    assert metric_sum("tether.tool.calls", tool=name, outcome="ok") == 2
    count, total = metric_histogram("tether.tool.duration", tool=name)
    assert count == 2
    assert total >= 0.1
    assert total * 1000 <= sum(r.duration_ms for r in results) + 1  # the same clock


async def test_failed_and_refused_calls_are_timed_too(
    metric_sum: Sum, metric_histogram: Histogram
) -> None:
    name = f"flaky_{uuid.uuid4().hex[:6]}"

    async def flaky(args: dict[str, Any]) -> str:
        raise ToolFailure("upstream_down", "the service did not answer.")

    tool = Tool(ToolDescriptor(name=name, description="fails", parameters=OPEN), flaky)
    executor = Executor(Registry([tool]), default_timeout_s=5)
    unknown = f"nosuch_{uuid.uuid4().hex[:6]}"

    failed = await executor.execute(execute(name))
    refused = await executor.execute(execute(unknown))

    assert failed.error_code == "upstream_down"
    assert refused.error_code == "unknown_tool"
    assert metric_sum("tether.tool.calls", tool=name, outcome="upstream_down") == 1
    assert metric_histogram("tether.tool.duration", tool=name)[0] == 1
    assert metric_histogram("tether.tool.duration", tool=unknown)[0] == 1
