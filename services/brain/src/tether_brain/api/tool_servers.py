"""Tool servers over HTTP (`/v1/tool-servers`), forwarded to the tools-runner, which owns
the rows and the key that seals their credentials (`tether_common.messages.tool_servers`).
The brain stores nothing and holds no key: it decides who may, and for which tenant.

Who may: `tool_servers.read` lists a tenant's servers and the shared ones;
`tool_servers.manage` adds and removes its tenant's. Over every tenant (an admin) also:
a stdio server (its command runs on the runner's host), a shared server, or another
tenant's. Credentials are write-only: the answer says `has_credentials`, never them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from tether_brain.api.deps import BusDep
from tether_common.errors import AuthError, ErrorCode
from tether_common.identity import Principal
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN
from tether_common.messages.tool_servers import (
    SHARED_TENANT,
    AddToolServer,
    ListToolServers,
    RemoveToolServer,
    ToolServerList,
    ToolServerRemoved,
    ToolServerSpec,
    ToolServerView,
)

ServerPath = Annotated[str, Path(pattern=ID_PATTERN)]


def _tenant_for(spec: ToolServerSpec, who: Principal) -> str:
    """Whose server `spec` is; an operator's is always its own tenant's, and only an admin
    adds a stdio server, a shared one, or another tenant's."""
    who.require("tool_servers.manage")
    admin = who.reach_of("tool_servers.manage") == "all"
    if not admin and (spec.transport == "stdio" or spec.shared or spec.tenant is not None):
        what = "a stdio server" if spec.transport == "stdio" else "a shared or another tenant's"
        raise AuthError(f"only an admin adds {what} server", code=ErrorCode.FORBIDDEN)
    if spec.shared:
        return SHARED_TENANT
    return spec.tenant or who.tenant


router = APIRouter(prefix="/v1", tags=["tool-servers"])


@router.post("/tool-servers", status_code=201)
async def add(body: ToolServerSpec, bus: BusDep, who: Caller) -> ToolServerView:
    """Add an MCP server for the caller's tenant (its tools are offered to that
    tenant's runs only); its `headers` or `env` are stored sealed, never shown."""
    tenant = _tenant_for(body, who)
    request = AddToolServer(spec=body, tenant=tenant, added_by=who.label)
    return await bus.request(bus.subjects.tool_server_add, request, timeout=30.0)


@router.get("/tool-servers")
async def listing(bus: BusDep, who: Caller) -> ToolServerList:
    """The caller's tenant's servers and the shared ones (an admin: every one)."""
    reach = who.reach("tool_servers.read")
    return await bus.request(bus.subjects.tool_server_list, ListToolServers(tenant=reach.tenant))


@router.delete("/tool-servers/{server_id}")
async def remove(server_id: ServerPath, bus: BusDep, who: Caller) -> ToolServerRemoved:
    """Remove a server (404 for one outside the caller's reach); its tools go from
    every runner replica within a notice."""
    reach = who.reach("tool_servers.manage")
    request = RemoveToolServer(server_id=server_id, tenant=reach.tenant)
    return await bus.request(bus.subjects.tool_server_remove, request, timeout=30.0)
