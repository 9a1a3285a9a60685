"""The tool servers of the `tool_servers` rows, connected: one supervised `McpLink` per
row, its tools in its tenant's own registry (a shared row's in the shared registry).

Each replica reads the rows at start, on every `tools.servers_changed` notice and every
`TETHER_RUNNER_TOOL_SERVERS_REFRESH_S` (a lost notice only delays), starts a link for a
new row and stops the link (and drops the tools) of a removed one. A tenant's server is
reached only through the pinned transport (`server_urls`), its credentials opened for
each connection from the row's sealed value; they are never logged, and a failure is
described by the transport's error, which holds no header."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import partial

from mcp import StdioServerParameters
from mcp.client._transport import Transport

from tether_common.errors import TetherError
from tether_common.messages.tool_servers import SHARED_TENANT, ToolServerView
from tether_common.messages.tools import ToolDescriptor, mcp_server_of
from tether_tools_runner.credentials import CredentialKey
from tether_tools_runner.mcp_tools import McpLink, stdio_target
from tether_tools_runner.server_store import ServerRow, ServerStore
from tether_tools_runner.server_urls import ServerDestinations, pinned_http
from tether_tools_runner.settings import McpServer
from tether_tools_runner.tool import Registry

log = logging.getLogger(__name__)

__all__ = ["LinkOptions", "TenantServers"]


@dataclass(frozen=True, slots=True)
class LinkOptions:
    refresh_s: float
    connect_timeout_s: float
    max_attempts: int


@dataclass(slots=True)
class _Running:
    row: ServerRow
    link: McpLink
    task: asyncio.Task[None] | None = field(default=None)


class TenantServers:
    """Owns the links of the rows; answers which tools each tenant's calls may name."""

    def __init__(
        self,
        store: ServerStore,
        shared: Registry,
        destinations: ServerDestinations,
        key: CredentialKey | None,
        options: LinkOptions,
        *,
        configured: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.shared = shared
        self.destinations = destinations
        self.key = key
        self.options = options
        self.configured = configured  # the settings' servers' names: shared, and first
        self._running: dict[str, _Running] = {}
        self._registries: dict[str, Registry] = {}
        self._lock = asyncio.Lock()
        shared.hold_with(self._held_shared)

    # ---- which tools a tenant sees -------------------------------------------------

    def registry_of(self, tenant: str) -> Registry | None:
        return self._registries.get(tenant)

    def shared_names(self) -> frozenset[str]:
        """Every server name offered to all tenants (the settings' and shared rows')."""
        rows = {r.row.name for r in self._running.values() if r.row.shared}
        return self.configured | rows

    def descriptors(self, tenant: str) -> list[ToolDescriptor]:
        """The tools of `tenant`'s own servers (a name a shared server has is not its)."""
        own = self._registries.get(tenant)
        shadowed = self.shared_names()
        return [
            d for d in (own.descriptors() if own else []) if mcp_server_of(d.name) not in shadowed
        ]

    def connecting(self, tenant: str | None) -> list[str]:
        """The servers of `tenant` (None: the shared rows) still connecting."""
        return [
            r.row.name
            for r in self._running.values()
            if (r.row.shared if tenant is None else r.row.tenant == tenant)
            and r.link.state == "connecting"
        ]

    def view(self, row: ServerRow) -> ToolServerView:
        """`row` as the API shows it: its connection here, never its credentials."""
        running = self._running.get(row.server_id)
        link = running.link if running is not None else None
        return ToolServerView(
            server_id=row.server_id,
            name=row.name,
            tenant=None if row.shared else row.tenant,
            shared=row.shared,
            transport=row.transport,
            url=row.url,
            command=row.command,
            args=list(row.args),
            trusted=row.trusted,
            has_credentials=row.sealed is not None,
            state=link.state if link is not None else "connecting",
            failure=link.failure if link is not None else "",
            tools=sorted(link.names) if link is not None else [],
            created_by=row.created_by,
            created_at=row.created_at,
        )

    def _own(self, tenant: str) -> Registry:
        """`tenant`'s registry, made with its hold: a call of a server of its own that
        is connecting or failed is answered so, never `unknown_tool`."""
        if (registry := self._registries.get(tenant)) is None:
            registry = self._registries[tenant] = Registry()
            registry.hold_with(partial(self._held, tenant))
        return registry

    def _held_shared(self, name: str) -> tuple[str, str] | None:
        return self._held(SHARED_TENANT, name)

    def _held(self, tenant: str, name: str) -> tuple[str, str] | None:
        server = mcp_server_of(name)
        for running in self._running.values():
            if running.row.tenant == tenant and running.row.name == server:
                return running.link.held(name)
        return None

    # ---- the links ---------------------------------------------------------------

    async def reload(self) -> None:
        """Start the links of new rows and stop those of removed rows."""
        rows = {row.server_id: row for row in await self.store.rows()}
        async with self._lock:
            for server_id in set(self._running) - set(rows):
                await self._stop(self._running.pop(server_id))
            for server_id, row in rows.items():
                if server_id not in self._running:
                    self._running[server_id] = self._start(row)

    def _start(self, row: ServerRow) -> _Running:
        registry = self.shared if row.shared else self._own(row.tenant)
        config = McpServer(
            name=row.name,
            command=row.command,
            args=list(row.args),
            url=row.url,
            trusted=row.trusted,
        )
        link = McpLink(
            config,
            registry,
            refresh_s=self.options.refresh_s,
            connect_timeout_s=self.options.connect_timeout_s,
            max_attempts=self.options.max_attempts,
            connect=lambda: self._transport(row, config),
        )
        running = _Running(row, link)
        running.task = asyncio.create_task(link.run(), name=f"tool server {row.server_id}")
        log.info("tool server %s (%s of %s) starts", row.server_id, row.name, row.tenant)
        return running

    def _transport(self, row: ServerRow, config: McpServer) -> StdioServerParameters | Transport:
        """How one connection reaches `row`'s server, its credentials opened just now."""
        credentials = self._credentials(row)
        if row.transport == "http" and row.url is not None:
            return pinned_http(row.url, credentials, self.destinations)
        return stdio_target(config.model_copy(update={"env": credentials}))

    def _credentials(self, row: ServerRow) -> dict[str, str]:
        if row.sealed is None:
            return {}
        if self.key is None:
            raise TetherError("no TETHER_RUNNER_CREDENTIALS_KEY: its credentials do not open")
        return self.key.open(row.sealed, tenant=row.tenant, server_id=row.server_id)

    async def _stop(self, running: _Running) -> None:
        if running.task is not None:
            running.task.cancel()
            await asyncio.gather(running.task, return_exceptions=True)
        registry = self.shared if running.row.shared else self._registries.get(running.row.tenant)
        for name in running.link.names:
            if registry is not None:
                registry.remove(name)
        log.info("tool server %s stopped", running.row.server_id)

    async def stop(self) -> None:
        async with self._lock:
            for running in self._running.values():
                await self._stop(running)
            self._running.clear()
