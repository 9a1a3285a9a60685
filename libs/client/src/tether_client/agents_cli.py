"""`tether agents list|show ID|apply -f agent.yaml|delete ID`: agents as resources, through
the brain's `/v1/agents` (the caller's token: `TETHER_TOKEN`, else the operator token).

An agent's id is unique within its tenant: `show` and `delete` address the caller's
tenant's agent (`--tenant` another, for an admin); `apply` the file's `tenant`. The
listing says which agents are shared with every tenant (set by an admin: `shared: true`).

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
from pydantic import ValidationError

from tether_client.client import TetherClient
from tether_client.console import Format, OutputOption, emit, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import MessageError, NotFoundError
from tether_common.messages.agents import AgentConfig, AgentView

__all__ = ["app", "apply", "read_document"]

app = typer.Typer(help="Agents as resources: list, show, apply, delete.", no_args_is_help=True)
AgentId = Annotated[str, typer.Argument(help="The agent's id.", show_default=False)]
TenantOption = Annotated[
    str | None,
    typer.Option("--tenant", help="The agent's tenant (default: yours; an admin's choice)."),
]

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


def row(agent: AgentView) -> tuple[Any, ...]:
    return (
        agent.id,
        f"v{agent.version}",
        agent.tenant,
        agent.owner or "-",
        agent.mode,
        len(agent.grants),
        "shared" if agent.shared else "-",
    )


COLUMNS = ["AGENT", "VERSION", "TENANT", "OWNER", "MODE", "GRANTS", "SHARED"]


def definition(document: dict[str, Any], path: str) -> AgentConfig:
    """The file's agent without its id and view fields, checked before anything is sent."""
    try:
        return AgentConfig.model_validate({k: v for k, v in document.items() if k not in _META})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'agent'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise MessageError(f"{path}: {problems}", code="invalid_request") from None


async def apply(client: TetherClient, document: dict[str, Any], path: str) -> tuple[str, AgentView]:
    """Create or replace; returns (`created`|`changed`, the agent as stored)."""
    agent_id, wanted = document["id"], definition(document, path)
    tenant = document.get("tenant")  # none: the one the id names for the caller
    try:
        current = await client.get_agent(agent_id, tenant)
    except NotFoundError:
        return "created", await client.create_agent(agent_id, wanted)
    version = document.get("version", current.version)
    return "changed", await client.replace_agent(agent_id, wanted, version=version, tenant=tenant)


@app.command("list")
@blocking
async def agents_list(output: OutputOption = Format.table) -> int:
    """The agents you may read.

    Example: tether agents list -o json
    """
    async with connect() as client:
        found = await client.list_agents()
    emit(found, output, rows_table(COLUMNS, map(row, found)) if found else "no agents")
    return 0


@app.command("show")
@blocking
async def agents_show(
    agent_id: AgentId, tenant: TenantOption = None, output: OutputOption = Format.yaml
) -> int:
    """One agent's whole definition (YAML by default: edit it and `apply` it back).

    Example: tether agents show writer > writer.yaml
    """
    async with connect() as client:
        emit(await client.get_agent(agent_id, tenant), output)
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
        outcome, stored = await apply(client, document, file)
    say(f"{outcome}: " + "  ".join(str(v) for v in row(stored)))
    return 0


@app.command("delete")
@blocking
async def agents_delete(agent_id: AgentId, tenant: TenantOption = None) -> int:
    """Delete an agent.

    Example: tether agents delete writer --tenant team-a
    """
    async with connect() as client:
        await client.delete_agent(agent_id, tenant)
    say(f"deleted: {agent_id}")
    return 0
