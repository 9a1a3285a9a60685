"""MCP servers as tool sources: each configured server (stdio command or streamable-HTTP
URL) is connected with the official `mcp` SDK and contributes `mcp.<server>.<tool>`.

Annotations map onto the catalogue: `readOnlyHint` → scope read, `destructiveHint` →
scope delete, `openWorldHint` false → reach instance, anything else (and an unannotated
tool) → reach external with an unclassified effect. A server that dies is restarted with
back-off, and its tools stay in the catalogue marked `available=False` meanwhile.

A server is `connecting` (starting, or restarting after a drop), `up`, or `failed` (its
command cannot start, or `max_attempts` connections in a row failed; it is still retried
now and then, quietly). While it connects, a call of `mcp.<server>.<tool>` is answered
`tool_not_ready` (retryable: not run, send it again) and the catalogue names the server
in `connecting`, never `unknown_tool`, whose answer is final; once it failed, a call is
answered `mcp_failed` naming the server. The hub answers for its names before the
registry does (`Registry.held`), so a refused call claims no idempotency key.

Each call carries its idempotency key (`run_id:call_id`) in the request's `_meta` under
`tether/idempotency-key`, so a server with effects of its own can keep to once too.

A stdio server dies with the runner, however the runner dies (`tether_common.lifeline`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any, Literal, cast

from mcp import Client, MCPError, StdioServerParameters
from mcp.client._transport import Transport
from mcp.client.stdio import get_default_environment
from mcp.types import CallToolResult, RequestParamsMeta, TextContent
from mcp.types import Tool as McpTool

from tether_common import lifeline
from tether_common.messages.tools import (
    MCP_FAILED,
    TOOL_NOT_READY,
    Reach,
    Scope,
    ToolDescriptor,
    mcp_server_of,
    mcp_tool_name,
)
from tether_common.retrying import Policy, delay_s
from tether_tools_runner.context import current_key
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry, Tool, ToolFailure, ToolFn

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "tether/idempotency-key"
# A supervised server reconnecting: for ever, at most every 30 s.
RECONNECT = Policy("reconnecting an MCP server", 0.5, 30.0, jitter=False)

LinkState = Literal["connecting", "up", "failed"]


def _cannot_start(exc: Exception) -> bool:
    """A failure no retry mends by itself: the command is missing or not executable.
    (Anything else, a configuration without command or url included, fails for good
    only after `max_attempts`: a broad class here would give up on a passing fault.)"""
    return isinstance(exc, (FileNotFoundError, PermissionError))


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
        name=mcp_tool_name(server, tool.name),
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

    def __init__(
        self,
        config: McpServer,
        registry: Registry,
        *,
        refresh_s: float,
        connect_timeout_s: float = 30.0,
        max_attempts: int = 5,
        connect: Callable[[], StdioServerParameters | Transport] | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        # How to reach the server when not as configured (a tenant's server: through the
        # pinned transport, with its credentials opened for this connection only).
        self.connect = connect
        self.refresh_s = refresh_s
        # A server that never answers its handshake is a failed connection, not a wait.
        self.connect_timeout_s = connect_timeout_s
        self.max_attempts = max_attempts  # failed connections in a row before `failed`
        self.client: Client | None = None
        self.names: set[str] = set()
        self._broken = asyncio.Event()
        self._changed = asyncio.Condition()
        self.state: LinkState = "connecting"
        self.failure = ""  # why the server failed, for the answer to a call of its tools

    @property
    def up(self) -> bool:
        return self.state == "up"

    def _target(self) -> StdioServerParameters | str | Transport:
        if self.connect is not None:
            return self.connect()
        if self.config.url:
            return self.config.url
        return stdio_target(self.config)

    async def run(self) -> None:
        """Supervise forever (until cancelled): connect, publish, watch, back off, retry.
        A server that cannot start, or fails `max_attempts` connections in a row, is
        `failed` (and still retried at the longest back-off)."""
        failures = 0
        while True:
            why, gave_up = "the server closed the connection", False
            try:
                async with contextlib.AsyncExitStack() as stack:
                    async with asyncio.timeout(self.connect_timeout_s):
                        client = await stack.enter_async_context(Client(self._target()))
                        await self._publish(client)
                    failures = 0
                    await self._watch(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of a server means: restart it
                failures += 1
                why = _describe(exc)
                log.warning("MCP server %s is down: %s", self.config.name, why)
                gave_up = _cannot_start(exc) or failures >= self.max_attempts
                if gave_up and self.state != "failed":
                    log.error("MCP server %s failed: %s", self.config.name, why)
            finally:
                self.client = None
                self._mark_unavailable()
            await self._set_state("failed" if gave_up else "connecting", why)
            await asyncio.sleep(delay_s(RECONNECT, failures))

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
        await self._set_state("up")

    async def _set_state(self, state: LinkState, failure: str = "") -> None:
        async with self._changed:
            self.state = state
            self.failure = failure if state == "failed" else ""
            self._changed.notify_all()

    async def wait_until(self, *, up: bool) -> None:
        """Wait for the server to be connected (or down): for start-up and for tests."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.up is up)

    async def wait_for(self, state: LinkState) -> None:
        """Wait for the server to reach `state` (for tests)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.state == state)

    def held(self, name: str) -> tuple[str, str] | None:
        """Why a call of `name` (one of this server's names) cannot run now, or None
        when the server is up (then the registry knows the tool or it does not exist)."""
        server = self.config.name
        match self.state:
            case "up":
                return None
            case "connecting":
                return TOOL_NOT_READY, (
                    f"not run: the MCP server '{server}' is still connecting, so {name} is "
                    "not loaded yet. The same call can be sent again once it is up."
                )
            case "failed":
                return MCP_FAILED, (
                    f"not run: the MCP server '{server}' failed ({self.failure}); its tools "
                    "cannot run until an operator fixes it."
                )

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
            if client is None:  # it dropped after the executor's check: nothing was sent
                held = self.held(mcp_tool_name(self.config.name, remote_name))
                raise ToolFailure(*(held or (TOOL_NOT_READY, "the MCP server is reconnecting.")))
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


def stdio_target(config: McpServer) -> StdioServerParameters:
    """How to start `config`'s stdio server, tied to this runner's life."""
    if not config.command:
        raise ValueError(f"MCP server {config.name} has neither command nor url")
    env = {**get_default_environment(), **config.env}
    # The SDK takes no preexec_fn: a small exec wrapper ties the server to this
    # runner, so a runner killed outright does not leave it running.
    argv = [config.command, *config.args]
    python, *wrapped = lifeline.command(argv, path=env.get("PATH", os.defpath))
    return StdioServerParameters(command=python, args=wrapped, env=env)


def _describe(exc: BaseException) -> str:
    """A failure in one line: the innermost error of the SDK's nested task groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer to the MCP handshake in time"
    return f"{type(exc).__name__}: {exc}"[:300]


class McpHub:
    """Owns one supervising task per configured server; `stop` cancels and awaits them.
    It answers for its servers' names in the registry (`held`) and the catalogue
    (`connecting`)."""

    def __init__(
        self,
        servers: list[McpServer],
        registry: Registry,
        *,
        refresh_s: float,
        connect_timeout_s: float = 30.0,
        max_attempts: int = 5,
    ) -> None:
        self.links = [
            McpLink(
                s,
                registry,
                refresh_s=refresh_s,
                connect_timeout_s=connect_timeout_s,
                max_attempts=max_attempts,
            )
            for s in servers
        ]
        self._by_server = {link.config.name: link for link in self.links}
        self._tasks: list[asyncio.Task[None]] = []
        registry.hold_with(self.held)

    def held(self, name: str) -> tuple[str, str] | None:
        """Why a call of `name` cannot run now, when it names a configured server that
        is not up; None for any other name."""
        server = mcp_server_of(name)
        link = self._by_server.get(server) if server is not None else None
        return link.held(name) if link is not None else None

    def connecting(self) -> list[str]:
        """The servers still connecting, for the catalogue."""
        return [link.config.name for link in self.links if link.state == "connecting"]

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(link.run()) for link in self.links]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


__all__ = ["IDEMPOTENCY_META_KEY", "McpHub", "McpLink", "descriptor_for", "stdio_target"]
