"""The `tools.servers.*` requests the brain forwards from `/v1/tool-servers` (it has
checked the caller's role and set the tenant): add (the URL judged, the credentials
sealed to the new row), list (never a credential), remove; each change announced to the
other replicas (`tools.servers_changed`). The brain never holds the key: only this
service, which sends the credentials, can open them."""

from __future__ import annotations

import logging
import uuid

from tether_common.bus import Bus
from tether_common.errors import ConfigError, ConflictError, ErrorCode, NotFoundError
from tether_common.messages.tool_servers import (
    SHARED_TENANT,
    AddToolServer,
    ListToolServers,
    RemoveToolServer,
    ToolServerList,
    ToolServerRemoved,
    ToolServersChanged,
    ToolServerView,
)
from tether_tools_runner.credentials import CredentialKey
from tether_tools_runner.server_store import ServerRow, ServerStore
from tether_tools_runner.server_urls import ServerDestinations
from tether_tools_runner.tenant_servers import TenantServers

log = logging.getLogger(__name__)

__all__ = ["ServerRoutes"]


class ServerRoutes:
    def __init__(
        self,
        bus: Bus,
        store: ServerStore,
        servers: TenantServers,
        destinations: ServerDestinations,
        key: CredentialKey | None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.servers = servers
        self.destinations = destinations
        self.key = key

    async def add(self, request: AddToolServer) -> ToolServerView:
        spec = request.spec
        if spec.url is not None:
            self.destinations.registered(spec.url)
        if spec.name in self.servers.shared_names():
            raise ConflictError(
                f"a shared tool server is named '{spec.name}'; choose another name",
                code=ErrorCode.TOOL_SERVER_EXISTS,
            )
        server_id = f"tsv_{uuid.uuid4().hex[:20]}"
        row = ServerRow(
            server_id=server_id,
            tenant=request.tenant,
            name=spec.name,
            transport=spec.transport,
            url=spec.url,
            command=spec.command,
            args=tuple(spec.args),
            trusted=spec.trusted,
            sealed=self._sealed(spec.credentials, request.tenant, server_id),
            created_by=request.added_by,
        )
        stored = await self.store.add(row)
        log.info(
            "tool server %s (%s) added for %s by %s",
            server_id,
            spec.name,
            "every tenant" if request.tenant == SHARED_TENANT else request.tenant,
            request.added_by,
        )
        await self._changed(server_id)
        return self.servers.view(stored)

    def _sealed(self, credentials: dict[str, str], tenant: str, server_id: str) -> bytes | None:
        if not credentials:
            return None
        if self.key is None:
            raise ConfigError(
                "this runner has no TETHER_RUNNER_CREDENTIALS_KEY, so it stores no credentials",
                code=ErrorCode.CREDENTIALS_KEY_MISSING,
            )
        return self.key.seal(credentials, tenant=tenant, server_id=server_id)

    async def listing(self, request: ListToolServers) -> ToolServerList:
        rows = await self.store.rows()
        if request.tenant is not None:
            rows = [r for r in rows if r.tenant == request.tenant or r.shared]
        return ToolServerList(servers=[self.servers.view(r) for r in rows])

    async def remove(self, request: RemoveToolServer) -> ToolServerRemoved:
        if not await self.store.remove(request.server_id, request.tenant):
            raise NotFoundError("no such tool server")
        log.info("tool server %s removed", request.server_id)
        await self._changed(request.server_id)
        return ToolServerRemoved(server_id=request.server_id)

    async def on_changed(self, notice: ToolServersChanged) -> None:
        await self.servers.reload()

    async def _changed(self, server_id: str) -> None:
        await self.servers.reload()  # this replica at once; the others on the notice
        await self.bus.publish(
            self.bus.subjects.tool_servers_changed, ToolServersChanged(server_id=server_id)
        )
