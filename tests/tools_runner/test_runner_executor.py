"""The executor never raises: unknown tools, broken schemas, slow and crashing tools all
come back as coded results; and each call sees its own run id."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tether_common.messages.tools import ToolDescriptor, ToolResult
from tether_tools_runner.context import current_run_id
from tether_tools_runner.executor import Executor
from tether_tools_runner.tool import Registry, Tool

Call = Callable[..., Awaitable[ToolResult]]
OPEN = {"type": "object", "properties": {}, "additionalProperties": False}


def tool(name: str, run: Callable[[dict[str, Any]], Awaitable[str]], schema: Any = None) -> Tool:
    return Tool(ToolDescriptor(name=name, description=name, parameters=schema or OPEN), run)


async def slow(args: dict[str, Any]) -> str:
    await asyncio.sleep(10)
    return "late"


async def crash(args: dict[str, Any]) -> str:
    raise RuntimeError("boom")


async def whoami(args: dict[str, Any]) -> str:
    await asyncio.sleep(0.01)
    return current_run_id.get()


async def test_failures_are_results(call: Call) -> None:
    broken = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    registry = Registry([tool("slow", slow), tool("crash", crash), tool("odd", whoami, broken)])
    executor = Executor(registry, default_timeout_s=0.2)
    assert (await call(executor, "nope", {})).error_code == "unknown_tool"
    assert (await call(executor, "slow", {})).error_code == "timeout"
    crashed = await call(executor, "crash", {})
    assert crashed.error_code == "tool_error"
    assert "boom" in crashed.content
    assert (await call(executor, "odd", {"x": 1})).error_code == "tool_error"


async def test_each_call_sees_its_own_run(call: Call) -> None:
    executor = Executor(Registry([tool("whoami", whoami)]), default_timeout_s=5)
    results = await asyncio.gather(
        *(call(executor, "whoami", {}, run_id=f"run-{n}") for n in range(5))
    )
    assert [r.content for r in results] == [f"run-{n}" for n in range(5)]
    assert current_run_id.get() == ""
