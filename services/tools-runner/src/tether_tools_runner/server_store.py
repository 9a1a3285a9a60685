"""The `tool_servers` rows (migration 0003): tenants' MCP servers and the shared ones an
admin added, each with its credentials sealed (`credentials`), shared by every replica."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.errors import ConflictError, ErrorCode
from tether_common.messages.tool_servers import SHARED_TENANT, ToolServerTransport
from tether_tools_runner.tables import tool_servers

__all__ = ["ServerRow", "ServerStore"]


@dataclass(frozen=True, slots=True)
class ServerRow:
    server_id: str
    tenant: str  # SHARED_TENANT: offered to every tenant
    name: str
    transport: ToolServerTransport
    url: str | None
    command: str | None
    args: tuple[str, ...]
    trusted: bool
    sealed: bytes | None  # the credentials, sealed to (tenant, server_id)
    created_by: str
    created_at: datetime | None = None

    @property
    def shared(self) -> bool:
        return self.tenant == SHARED_TENANT

    def values(self) -> dict[str, Any]:
        return {
            "server_id": self.server_id,
            "tenant": self.tenant,
            "name": self.name,
            "transport": self.transport,
            "url": self.url,
            "command": self.command,
            "args": list(self.args),
            "trusted": self.trusted,
            "sealed": self.sealed,
            "created_by": self.created_by,
        }


def _row(found: Any) -> ServerRow:
    return ServerRow(
        server_id=found.server_id,
        tenant=found.tenant,
        name=found.name,
        transport=found.transport,
        url=found.url,
        command=found.command,
        args=tuple(found.args or ()),
        trusted=found.trusted,
        sealed=found.sealed,
        created_by=found.created_by,
        created_at=found.created_at,
    )


class ServerStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def add(self, row: ServerRow) -> ServerRow:
        """Insert `row`; `tool_server_exists` when its tenant has a server of that name."""
        try:
            async with self.engine.begin() as conn:
                stored = await conn.execute(
                    tool_servers.insert().values(row.values()).returning(tool_servers)
                )
                return _row(stored.one())
        except IntegrityError:
            raise ConflictError(
                f"a tool server named '{row.name}' exists already here; remove it first",
                code=ErrorCode.TOOL_SERVER_EXISTS,
            ) from None

    async def rows(self) -> list[ServerRow]:
        async with self.engine.connect() as conn:
            found = await conn.execute(select(tool_servers).order_by(tool_servers.c.created_at))
        return [_row(r) for r in found]

    async def remove(self, server_id: str, tenant: str | None) -> bool:
        """Delete the server if it is within reach (`tenant` None: any)."""
        statement = delete(tool_servers).where(tool_servers.c.server_id == server_id)
        if tenant is not None:
            statement = statement.where(tool_servers.c.tenant == tenant)
        async with self.engine.begin() as conn:
            done = await conn.execute(statement)
        return bool(done.rowcount)
