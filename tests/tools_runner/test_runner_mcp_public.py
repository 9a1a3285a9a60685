"""A public MCP server package from the registry (`mcp-server-time`, the reference time
server) contributes its tools to the catalogue, and they run through the executor."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.mcp_tools import McpHub
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry

Call = Callable[..., Awaitable[ToolResult]]


@pytest.fixture
async def time_hub() -> AsyncIterator[McpHub]:
    assert importlib.util.find_spec("mcp_server_time"), "mcp-server-time is not installed (dev)"
    server = McpServer(name="time", command=sys.executable, args=["-m", "mcp_server_time"])
    hub = McpHub([server], Registry(), refresh_s=30)
    await hub.start()
    try:
        await hub.links[0].wait_until(up=True)
        yield hub
    finally:
        await hub.stop()


async def test_the_public_time_server_tools_are_offered_and_run(
    time_hub: McpHub, call: Call
) -> None:
    names = {d.name for d in time_hub.links[0].registry.descriptors()}
    assert "mcp.time.get_current_time" in names
    executor = Executor(time_hub.links[0].registry, default_timeout_s=20)
    result = await call(executor, "mcp.time.get_current_time", {"timezone": "Asia/Tokyo"})
    assert result.ok, result.content
    assert "Asia/Tokyo" in result.content
