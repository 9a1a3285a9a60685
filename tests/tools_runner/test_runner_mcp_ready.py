"""An MCP server that is not up yet, or never will be, as the runner answers for it
(issue 15): while a configured server connects, a call of one of its tools is
`tool_not_ready` (not run, retryable) and the catalogue names the server as connecting,
never `unknown_tool`; a server that cannot start, or never finishes its handshake, is
`failed` and its calls are answered `mcp_failed` naming it; a name of a server that is
not configured stays `unknown_tool`. Real server processes over stdio, no bus."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.messages.tools import MCP_FAILED, TOOL_NOT_READY, ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.mcp_tools import McpHub
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry

Call = Callable[..., Awaitable[ToolResult]]
SERVER = Path(__file__).parent.parent / "chaos" / "chaos_mcp_server.py"
WAIT_S = 60.0  # generous: a server process starts in seconds on a loaded machine


def held_server(name: str, tmp_path: Path) -> tuple[McpServer, Path]:
    """The chaos MCP server, held before its handshake until the returned file goes."""
    hold = tmp_path / f"{name}.hold"
    hold.touch()
    args = [str(SERVER), str(tmp_path / f"{name}.ledger"), str(hold)]
    return McpServer(name=name, command=sys.executable, args=args), hold


@pytest.fixture
async def hubs() -> AsyncIterator[list[McpHub]]:
    """Hubs the test makes; each is stopped after it."""
    made: list[McpHub] = []
    try:
        yield made
    finally:
        for hub in made:
            await hub.stop()


async def started(
    hubs: list[McpHub],
    servers: list[McpServer],
    *,
    connect_timeout_s: float = 30.0,
    max_attempts: int = 5,
) -> McpHub:
    hub = McpHub(
        servers,
        Registry(),
        refresh_s=30,
        connect_timeout_s=connect_timeout_s,
        max_attempts=max_attempts,
    )
    hubs.append(hub)
    await hub.start()
    return hub


async def test_a_call_while_its_server_connects_is_not_ready_then_runs(
    hubs: list[McpHub], call: Call, tmp_path: Path
) -> None:
    config, hold = held_server("slow", tmp_path)
    hub = await started(hubs, [config])
    link = hub.links[0]
    executor = Executor(link.registry, default_timeout_s=10)
    early = await call(executor, "mcp.slow.slow_read", {"seconds": 0})
    assert early.error_code == TOOL_NOT_READY, early.content
    assert "'slow' is still connecting" in early.content
    assert hub.connecting() == ["slow"]
    assert not (tmp_path / "slow.ledger").exists()  # nothing ran
    hold.unlink()
    await asyncio.wait_for(link.wait_until(up=True), WAIT_S)
    assert hub.connecting() == []
    later = await call(executor, "mcp.slow.slow_read", {"seconds": 0})
    assert later.ok, later.content
    made_up = await call(executor, "mcp.slow.no_such_tool", {})
    assert made_up.error_code == "unknown_tool"  # once up, its list is the truth


async def test_a_server_whose_command_cannot_start_fails_for_good(
    hubs: list[McpHub], call: Call
) -> None:
    broken = McpServer(name="broken", command="/nonexistent/mcp-server")
    hub = await started(hubs, [broken])
    await asyncio.wait_for(hub.links[0].wait_for("failed"), WAIT_S)
    result = await call(Executor(hub.links[0].registry, default_timeout_s=10), "mcp.broken.x", {})
    assert result.error_code == MCP_FAILED, result.content
    assert "MCP server 'broken' failed" in result.content
    assert "FileNotFoundError" in result.content
    assert hub.connecting() == []


async def test_a_server_that_never_answers_its_handshake_fails_after_its_attempts(
    hubs: list[McpHub], call: Call, tmp_path: Path
) -> None:
    config, _hold = held_server("mute", tmp_path)  # the hold is never lifted
    hub = await started(hubs, [config], connect_timeout_s=0.5, max_attempts=2)
    link = hub.links[0]
    executor = Executor(link.registry, default_timeout_s=10)
    assert (await call(executor, "mcp.mute.slow_read", {"seconds": 0})).error_code in {
        TOOL_NOT_READY,
        MCP_FAILED,  # a very slow machine may have spent both attempts already
    }
    await asyncio.wait_for(link.wait_for("failed"), WAIT_S)
    result = await call(executor, "mcp.mute.slow_read", {"seconds": 0})
    assert result.error_code == MCP_FAILED, result.content
    assert "'mute' failed (no answer to the MCP handshake in time)" in result.content


async def test_a_name_of_a_server_not_configured_is_unknown(
    hubs: list[McpHub], call: Call, tmp_path: Path
) -> None:
    config, _hold = held_server("slow", tmp_path)
    hub = await started(hubs, [config])
    executor = Executor(hub.links[0].registry, default_timeout_s=10)
    for name in ("mcp.ghost.slow_read", "mcp.slow", "mcp..slow_read", "slow_read"):
        result = await call(executor, name, {"seconds": 0})
        assert result.error_code == "unknown_tool", (name, result.content)
