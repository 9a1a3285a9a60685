"""`tether agents list|show ID|apply -f agent.yaml|delete ID`: agents as resources, through
the brain's `/v1/agents` (the caller's token: `TETHER_TOKEN`, else the operator token).

`apply` reads one agent (`id` plus its definition) from a YAML or JSON file (`-` is
standard input) and creates it, or replaces it as it stands: at the file's `version`
if it has one (a stale file is refused with 409), else at the version just read.
YAML needs PyYAML; without it, only JSON files are read (JSON is YAML too).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether_client.client import TetherClient, raise_for_error
from tether_client.ops_cli import client_token, say
from tether_common.errors import MessageError, NotFoundError

_META = ("id", "version", "source", "changed_by", "changed_at")


def read_document(path: str) -> dict[str, Any]:
    """The agent in the file: a mapping, from YAML if PyYAML is installed, else JSON."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:  # the client does not depend on PyYAML: JSON then
        try:
            found = json.loads(text)
        except ValueError as exc:
            raise MessageError(
                f"{path}: not JSON ({exc}); install PyYAML to apply YAML files",
                code="invalid_request",
            ) from None
    else:
        try:
            found = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise MessageError(f"{path}: not YAML: {exc}", code="invalid_request") from None
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        raise MessageError(f"{path}: expected a mapping with an 'id'", code="invalid_request")
    return found


def line(agent: dict[str, Any]) -> str:
    return "  ".join(
        [
            f"{agent['id']:20}",
            f"v{agent['version']:<4}",
            f"{agent.get('tenant', ''):12}",
            f"owner={agent.get('owner') or '-':10}",
            f"{agent.get('mode', ''):11}",
            f"{len(agent.get('grants', []))} grants",
        ]
    )


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


async def agents_list(_args: argparse.Namespace, api_url: str) -> int:
    async with TetherClient(api_url, token=client_token()) as client:
        found = await AgentsApi(client).list()
    for agent in found:
        say(line(agent))
    if not found:
        say("no agents")
    return 0


async def agents_show(args: argparse.Namespace, api_url: str) -> int:
    async with TetherClient(api_url, token=client_token()) as client:
        found = await AgentsApi(client).get(args.agent_id)
    say(json.dumps(found, indent=2, sort_keys=True))
    return 0


async def agents_apply(args: argparse.Namespace, api_url: str) -> int:
    document = read_document(args.file)
    async with TetherClient(api_url, token=client_token()) as client:
        outcome, stored = await AgentsApi(client).apply(document)
    say(f"{outcome}: {line(stored)}")
    return 0


async def agents_delete(args: argparse.Namespace, api_url: str) -> int:
    async with TetherClient(api_url, token=client_token()) as client:
        await AgentsApi(client).delete(args.agent_id)
    say(f"deleted: {args.agent_id}")
    return 0


def add_subcommands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], api_url: Callable[[], str]
) -> None:
    """Register `agents list|show|apply|delete` on the `tether` parser."""
    agents = sub.add_parser("agents", help="agents as resources").add_subparsers(
        dest="action", required=True
    )

    async def run_list(args: argparse.Namespace) -> int:
        return await agents_list(args, api_url())

    async def run_show(args: argparse.Namespace) -> int:
        return await agents_show(args, api_url())

    async def run_apply(args: argparse.Namespace) -> int:
        return await agents_apply(args, api_url())

    async def run_delete(args: argparse.Namespace) -> int:
        return await agents_delete(args, api_url())

    agents.add_parser("list", help="the agents you may read").set_defaults(fn=run_list)
    show = agents.add_parser("show", help="one agent's whole definition, as JSON")
    show.add_argument("agent_id")
    show.set_defaults(fn=run_show)
    apply = agents.add_parser("apply", help="create or replace an agent from a file")
    apply.add_argument("-f", "--file", required=True, help="YAML or JSON; '-' for stdin")
    apply.set_defaults(fn=run_apply)
    delete = agents.add_parser("delete", help="delete an agent")
    delete.add_argument("agent_id")
    delete.set_defaults(fn=run_delete)
