"""`tether tool-servers add|list|remove`: a tenant's own MCP servers, through the brain's
`/v1/tool-servers` (a token that may `tool_servers.manage`; stdio and shared servers:
an admin). A credential is sent once and never shown back; give its value from the
environment (`--header-env`) to keep it out of shell history and process listings."""

from __future__ import annotations

import os
from typing import Annotated, Any, TypeVar

import httpx
import typer
from pydantic import BaseModel

from tether_client.client import raise_for_error
from tether_client.console import Format, OutputOption, emit, say
from tether_client.endpoints import api_url
from tether_client.session import blocking, client_token
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.tool_servers import (
    ToolServerList,
    ToolServerRemoved,
    ToolServerView,
)

__all__ = ["app", "pairs"]

app = typer.Typer(help="A tenant's own MCP tool servers: add, list, remove.", no_args_is_help=True)
M = TypeVar("M", bound=BaseModel)


async def servers_call(model: type[M], method: str, path: str = "", **kwargs: Any) -> M:
    """One `/v1/tool-servers` route, its answer read as `model`."""
    token = client_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=api_url(), headers=headers, timeout=60) as http:
        response = await http.request(method, "/v1/tool-servers" + path, **kwargs)
    raise_for_error(response)
    return model.model_validate_json(response.content)


def pairs(literal: list[str] | None, from_env: list[str] | None) -> dict[str, str]:
    """`NAME=VALUE` pairs, and `NAME=VARIABLE` pairs whose value is that environment
    variable's (a missing one is an error naming the variable, never a value)."""
    found: dict[str, str] = {}
    for item in literal or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise MessageError(f"{name or item!r}: give NAME=VALUE", code=ErrorCode.BAD_REQUEST)
        found[name.strip()] = value
    for item in from_env or []:
        name, eq, variable = item.partition("=")
        if not eq or not name or variable not in os.environ:
            raise MessageError(
                f"{name!r}: give NAME=VARIABLE, with VARIABLE set in the environment",
                code=ErrorCode.BAD_REQUEST,
            )
        found[name.strip()] = os.environ[variable]
    return found


def server_line(server: ToolServerView) -> str:
    owner = "shared" if server.shared else (server.tenant or "")
    where = server.url or " ".join([server.command or "", *server.args])
    secret = "credentials" if server.has_credentials else "-"
    failure = f" ({server.failure})" if server.failure else ""
    state = f"{server.state}{failure}"
    return "  ".join([server.server_id, f"{server.name:16}", f"{owner:12}", state, secret, where])


@app.command("add")
@blocking
async def servers_add(
    name: Annotated[str, typer.Argument(help="Its tools are mcp.<name>.<tool>.")],
    url: Annotated[str | None, typer.Option(help="A streamable-HTTP MCP endpoint.")] = None,
    command: Annotated[str | None, typer.Option(help="A stdio server's command (admins).")] = None,
    arg: Annotated[
        list[str] | None, typer.Option(help="An argument of the stdio command (repeat).")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE credential header (repeat).")
    ] = None,
    header_env: Annotated[
        list[str] | None,
        typer.Option(help="NAME=VARIABLE: the header's value from that environment variable."),
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="A stdio server's NAME=VARIABLE credential env.")
    ] = None,
    trusted: Annotated[bool, typer.Option(help="Its results do not taint a run.")] = False,
    shared: Annotated[bool, typer.Option(help="Offered to every tenant (admins).")] = False,
    tenant: Annotated[str | None, typer.Option(help="Another tenant's (admins).")] = None,
    output: OutputOption = Format.table,
) -> int:
    """Add an MCP server for this tenant; its credentials are stored sealed, never shown.

    Example: tether tool-servers add crm --url https://crm.example.com/mcp --header-env Authorization=MCP_TOKEN
    (the header's value is read from the variable MCP_TOKEN, never from the command line)
    """
    body: dict[str, Any] = {"name": name, "trusted": trusted, "shared": shared}
    if command is not None:
        body |= {"transport": "stdio", "command": command, "args": arg or []}
        body["env"] = pairs(None, env)
    else:
        body |= {"transport": "http", "url": url, "headers": pairs(header, header_env)}
    if tenant:
        body["tenant"] = tenant
    added = await servers_call(ToolServerView, "POST", json=body)
    emit(added, output, server_line(added))
    return 0


@app.command("list")
@blocking
async def servers_list(output: OutputOption = Format.table) -> int:
    """This tenant's servers and the shared ones, with their state on one runner.

    Example: tether tool-servers list -o json
    """
    found = (await servers_call(ToolServerList, "GET")).servers
    emit(found, output, "\n".join(map(server_line, found)) or "no tool servers")
    return 0


@app.command("remove")
@blocking
async def servers_remove(
    server_id: Annotated[str, typer.Argument(help="The server's id.", show_default=False)],
) -> int:
    """Remove a server; its tools leave every runner within a notice.

    Example: tether tool-servers remove tsv_0123456789abcdef0123
    """
    removed = await servers_call(ToolServerRemoved, "DELETE", f"/{server_id}")
    say(f"removed {removed.server_id}")
    return 0
