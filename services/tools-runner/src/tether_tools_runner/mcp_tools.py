"""MCP servers as tool sources: each configured server (stdio command or streamable-HTTP
URL) is connected with the official `mcp` SDK and contributes `mcp.<server>.<tool>`.

Annotations map onto the catalogue: `readOnlyHint` → scope read, `destructiveHint` →
scope delete, `openWorldHint` false → reach instance, anything else (and an unannotated
tool) → reach external with an unclassified effect. A server that dies is restarted with
back-off, and its tools stay in the catalogue marked `available=False` meanwhile.

Each call carries its idempotency key (`run_id:call_id`) in the request's `_meta` under
`tether/idempotency-key`, so a server with effects of its own can keep to once too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, cast

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.types import CallToolResult, RequestParamsMeta, TextContent
from mcp.types import Tool as McpTool

from tether_common.messages.tools import Reach, Scope, ToolDescriptor
from tether_tools_runner.context import current_key
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry, Tool, ToolFailure, ToolFn

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0
IDEMPOTENCY_META_KEY = "tether/idempotency-key"


def descriptor_for(server: str, tool: McpTool, *, trusted: bool = False) -> ToolDescriptor:
    """The catalogue entry of one MCP tool; unknown or missing hints err towards danger.
    Its output is untrusted unless the operator declared the server `trusted`."""
    hints = tool.annotations
    scope: Scope = "update"
    reach: Reach = "external"
    if hints is not None:
        if hints.read_only_hint:
            scope = "read"
        elif hints.destructive_hint:
            scope = "delete"
        if hints.open_world_hint is False:
            reach = "instance"
    schema = dict(tool.input_schema or {"type": "object", "properties": {}})
    # Our catalogue is strict: arguments a server did not declare are refused here.
    schema.setdefault("additionalProperties", False)
    return ToolDescriptor(
        name=f"mcp.{server}.{tool.name}",
        description=(tool.description or f"Tool '{tool.name}' of the MCP server '{server}'.")
        + f" (MCP server '{server}'.)",
        parameters=schema,
        scope=scope,
        reach=reach,
        effect="read" if scope == "read" else ("mcp" if hints is not None else "unclassified"),
        idempotent=bool(hints and (hints.idempotent_hint or hints.read_only_hint)),
        output_trust="trusted" if trusted else "untrusted",
    )


def result_text(result: CallToolResult) -> str:
    parts = [
        block.text if isinstance(block, TextContent) else f"[{block.type} content omitted]"
        for block in result.content
    ]
    return "\n".join(parts) if parts else "(the tool returned no content)"


class McpLink:
    """One MCP server: connected, its tools published, watched, restarted when it dies."""

    def __init__(self, config: McpServer, registry: Registry, *, refresh_s: float) -> None:
        self.config = config
        self.registry = registry
        self.refresh_s = refresh_s
        self.client: Client | None = None
        self.names: set[str] = set()
        self._broken = asyncio.Event()
        self._changed = asyncio.Condition()
        self.up = False

    def _target(self) -> StdioServerParameters | str:
        if self.config.url:
            return self.config.url
        if not self.config.command:
            raise ValueError(f"MCP server {self.config.name} has neither command nor url")
        env = {**get_default_environment(), **self.config.env}
        return StdioServerParameters(command=self.config.command, args=self.config.args, env=env)

    async def run(self) -> None:
        """Supervise forever (until cancelled): connect, publish, watch, back off, retry."""
        backoff = 0.5
        while True:
            try:
                async with Client(self._target()) as client:
                    await self._publish(client)
                    backoff = 0.5
                    await self._watch(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of a server means: restart it
                log.warning("MCP server %s is down: %s", self.config.name, exc)
            finally:
                self.client = None
                self._mark_unavailable()
                await self._set_up(False)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _publish(self, client: Client) -> None:
        listing = await client.list_tools(cache_mode="bypass")
        fresh = {}
        for tool in listing.tools:
            descriptor = descriptor_for(self.config.name, tool, trusted=self.config.trusted)
            fresh[descriptor.name] = Tool(descriptor, self._caller(tool.name))
        for stale in self.names - set(fresh):
            self.registry.remove(stale)
        for entry in fresh.values():
            self.registry.add(entry)
        self.names = set(fresh)
        self.client = client
        self._broken.clear()
        await self._set_up(True)

    async def _set_up(self, up: bool) -> None:
        async with self._changed:
            self.up = up
            self._changed.notify_all()

    async def wait_until(self, *, up: bool) -> None:
        """Wait for the server to be connected (or down): for start-up and for tests."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.up is up)

    async def _watch(self, client: Client) -> None:
        """Re-read the tool list every `refresh_s`; a failed call wakes this at once."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._broken.wait(), self.refresh_s)
            await self._publish(client)  # raises if the server is gone

    def _mark_unavailable(self) -> None:
        for name in self.names:
            tool = self.registry.get(name)
            if tool is not None and tool.descriptor.available:
                down = tool.descriptor.model_copy(update={"available": False})
                self.registry.add(Tool(down, tool.run))

    def _caller(self, remote_name: str) -> ToolFn:
        async def call(args: dict[str, Any]) -> str:
            client = self.client
            if client is None:
                raise ToolFailure(
                    "mcp_unavailable", f"MCP server {self.config.name} is down; it is restarting."
                )
            key = current_key.get()
            # An open map (extra keys round-trip), which mypy's TypedDict cannot express.
            meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key}) if key else None
            try:
                result = await client.call_tool(remote_name, args, meta=meta)
            except MCPError as exc:
                self._broken.set()
                raise ToolFailure("mcp_error", f"MCP server {self.config.name}: {exc}.") from None
            if result.is_error:
                raise ToolFailure("mcp_tool_error", result_text(result))
            return result_text(result)

        return call


class McpHub:
    """Owns one supervising task per configured server; `stop` cancels and awaits them."""

    def __init__(self, servers: list[McpServer], registry: Registry, *, refresh_s: float) -> None:
        self.links = [McpLink(s, registry, refresh_s=refresh_s) for s in servers]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(link.run()) for link in self.links]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


__all__ = ["IDEMPOTENCY_META_KEY", "McpHub", "McpLink", "descriptor_for"]
