"""`tether agents list|show ID|apply -f agent.yaml|delete ID`: agents as resources, through
the brain's `/v1/agents` (the caller's token: `TETHER_TOKEN`, else the operator token).

`apply` reads one agent (`id` plus its definition) from a YAML or JSON file (`-` is
standard input) and creates it, or replaces it as it stands: at the file's `version`
if it has one (a stale file is refused with 409), else at the version just read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from tether_client.client import TetherClient, raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import MessageError, NotFoundError

__all__ = ["AgentsApi", "app", "read_document"]

app = typer.Typer(help="Agents as resources: list, show, apply, delete.", no_args_is_help=True)
AgentId = Annotated[str, typer.Argument(help="The agent's id.", show_default=False)]

_META = ("id", "version", "source", "changed_by", "changed_at")


def read_document(path: str) -> dict[str, Any]:
    """The agent in the file (YAML, which JSON is too): a mapping with an `id`."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MessageError(f"{path}: not YAML: {exc}", code="invalid_request") from None
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        raise MessageError(f"{path}: expected a mapping with an 'id'", code="invalid_request")
    return found


def row(agent: dict[str, Any]) -> tuple[Any, ...]:
    return (
        agent["id"],
        f"v{agent['version']}",
        agent.get("tenant", ""),
        agent.get("owner") or "-",
        agent.get("mode", ""),
        len(agent.get("grants", [])),
    )


COLUMNS = ["AGENT", "VERSION", "TENANT", "OWNER", "MODE", "GRANTS"]


class AgentsApi:
    """The `/v1/agents` routes over the client's connection."""

    def __init__(self, client: TetherClient) -> None:
        self.http = client._http

    async def list(self) -> list[dict[str, Any]]:
        response = await self.http.get("/v1/agents")
        raise_for_error(response)
        return list(response.json()["agents"])

    async def get(self, agent_id: str) -> dict[str, Any]:
        response = await self.http.get(f"/v1/agents/{agent_id}")
        raise_for_error(response)
        return dict(response.json())

    async def apply(self, document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Create or replace; returns (`created`|`changed`, the agent as stored)."""
        agent_id = document["id"]
        body = {k: v for k, v in document.items() if k not in _META}
        try:
            current = await self.get(agent_id)
        except NotFoundError:
            response = await self.http.post("/v1/agents", json={"id": agent_id, **body})
            raise_for_error(response)
            return "created", dict(response.json())
        version = document.get("version", current["version"])
        response = await self.http.put(
            f"/v1/agents/{agent_id}", json=body, headers={"If-Match": f'"{version}"'}
        )
        raise_for_error(response)
        return "changed", dict(response.json())

    async def delete(self, agent_id: str) -> None:
        response = await self.http.delete(f"/v1/agents/{agent_id}")
        raise_for_error(response)


@app.command("list")
@blocking
async def agents_list(output: OutputOption = Format.table) -> int:
    """The agents you may read.

    Example: tether agents list -o json
    """
    async with connect() as client:
        found = await AgentsApi(client).list()
    emit(found, output, rows_table(COLUMNS, map(row, found)) if found else "no agents")
    return 0


@app.command("show")
@blocking
async def agents_show(agent_id: AgentId, output: OutputOption = Format.yaml) -> int:
    """One agent's whole definition (YAML by default: edit it and `apply` it back).

    Example: tether agents show writer > writer.yaml
    """
    async with connect() as client:
        emit(await AgentsApi(client).get(agent_id), output)
    return 0


@app.command("apply")
@blocking
async def agents_apply(
    file: Annotated[str, typer.Option("--file", "-f", help="YAML or JSON; '-' for stdin.")],
) -> int:
    """Create an agent, or replace it as it stands: at the file's `version` if it has one
    (a stale file is refused, exit 6), else at the version just read.

    Example: tether agents apply -f writer.yaml
    """
    document = read_document(file)
    async with connect() as client:
        outcome, stored = await AgentsApi(client).apply(document)
    say(f"{outcome}: " + "  ".join(str(v) for v in row(stored)))
    return 0


@app.command("delete")
@blocking
async def agents_delete(agent_id: AgentId) -> int:
    """Delete an agent.

    Example: tether agents delete writer
    """
    async with connect() as client:
        await AgentsApi(client).delete(agent_id)
    say(f"deleted: {agent_id}")
    return 0
