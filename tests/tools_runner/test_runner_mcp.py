"""MCP through a real server process (written with the `mcp` SDK, over stdio): tools
appear as `mcp.<server>.<tool>` with annotations mapped onto scope and reach, calls go
through, and a server that dies is marked unavailable, restarted and served again;
the same server over streamable HTTP."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.mcp_tools import McpHub, descriptor_for
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry

Call = Callable[..., Awaitable[ToolResult]]
SERVER = Path(__file__).with_name("mcp_notes_server.py")


@pytest.fixture
async def hub() -> AsyncIterator[McpHub]:
    config = McpServer(name="notes", command=sys.executable, args=[str(SERVER)])
    hub = McpHub([config], Registry(), refresh_s=30)
    await hub.start()
    try:
        await hub.links[0].wait_until(up=True)
        yield hub
    finally:
        await hub.stop()


def executor_of(hub: McpHub) -> Executor:
    return Executor(hub.links[0].registry, default_timeout_s=10)


async def test_tools_are_published_with_mapped_annotations(hub: McpHub) -> None:
    descriptors = {d.name: d for d in hub.links[0].registry.descriptors()}
    assert set(descriptors) == {
        "mcp.notes.read_note",
        "mcp.notes.delete_note",
        "mcp.notes.write_note",
        "mcp.notes.fail",
        "mcp.notes.crash",
    }
    read, delete = descriptors["mcp.notes.read_note"], descriptors["mcp.notes.delete_note"]
    write = descriptors["mcp.notes.write_note"]
    assert (read.scope, read.reach, read.effect) == ("read", "instance", "read")
    assert (delete.scope, delete.reach) == ("delete", "instance")
    assert (write.scope, write.reach, write.effect) == ("update", "external", "unclassified")
    assert write.parameters["additionalProperties"] is False


async def test_calls_go_through_and_errors_are_results(hub: McpHub, call: Call) -> None:
    executor = executor_of(hub)
    saved = await call(executor, "mcp.notes.write_note", {"name": "a", "text": "hello"})
    assert saved.content == "saved a"
    read = await call(executor, "mcp.notes.read_note", {"name": "a"})
    assert read.content == "hello"
    failed = await call(executor, "mcp.notes.fail", {})
    assert failed.error_code == "mcp_tool_error"
    assert "always fails" in failed.content
    wrong = await call(executor, "mcp.notes.read_note", {"name": "a", "extra": 1})
    assert wrong.error_code == "schema_invalid"


async def test_a_dead_server_is_marked_unavailable_and_restarted(hub: McpHub, call: Call) -> None:
    link, executor = hub.links[0], executor_of(hub)
    crashed = await call(executor, "mcp.notes.crash", {})
    assert crashed.error_code == "mcp_error"
    await link.wait_until(up=False)
    assert not any(d.available for d in link.registry.descriptors())
    down = await call(executor, "mcp.notes.read_note", {"name": "a"})
    assert down.error_code == "tool_not_ready", down.content  # not run; it reconnects
    await link.wait_until(up=True)
    assert all(d.available for d in link.registry.descriptors())
    again = await call(executor, "mcp.notes.read_note", {"name": "a"})
    assert again.content == "no note named a"


@pytest.mark.parametrize(
    ("hints", "scope", "reach", "effect"),
    [
        (None, "update", "external", "unclassified"),
        (ToolAnnotations(read_only_hint=True), "read", "external", "read"),
        (ToolAnnotations(destructive_hint=True), "delete", "external", "mcp"),
        (ToolAnnotations(open_world_hint=False), "update", "instance", "mcp"),
        (ToolAnnotations(read_only_hint=True, open_world_hint=True), "read", "external", "read"),
    ],
)
def test_annotation_mapping(
    hints: ToolAnnotations | None, scope: str, reach: str, effect: str
) -> None:
    tool = McpTool(name="t", input_schema={"type": "object"}, annotations=hints)
    descriptor = descriptor_for("srv", tool)
    assert (descriptor.scope, descriptor.reach, descriptor.effect) == (scope, reach, effect)
    assert descriptor.name == "mcp.srv.t"


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "--http",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        await proc.wait()


async def test_streamable_http_server(http_server: str, call: Call) -> None:
    # The link retries with back-off until the server listens: no sleep needed here.
    hub = McpHub([McpServer(name="web", url=http_server)], Registry(), refresh_s=30)
    await hub.start()
    try:
        await asyncio.wait_for(hub.links[0].wait_until(up=True), 30)
        executor = executor_of(hub)
        saved = await call(executor, "mcp.web.write_note", {"name": "h", "text": "over http"})
        assert saved.content == "saved h"
        read = await call(executor, "mcp.web.read_note", {"name": "h"})
        assert read.content == "over http"
    finally:
        await hub.stop()
