"""The `tether` command line: up, run, runs list|follow|show|stop, tools list, skills, approvals,
audit verify, policy explain, tokens create|list|revoke, agents list|show|apply|delete."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import get_args

from tether_client.agents_cli import add_subcommands as add_agents_commands
from tether_client.client import DEFAULT_API_URL, TetherClient
from tether_client.ops_cli import add_subcommands as add_ops_commands
from tether_client.ops_cli import add_tools_run, client_token, offer_approval
from tether_client.render import render
from tether_client.skills_cli import add_subcommands as add_skills_commands
from tether_client.tokens_cli import add_subcommands as add_tokens_commands
from tether_client.webhooks_cli import add_subcommands as add_webhooks_commands
from tether_common.errors import TetherError
from tether_common.messages.runs import RunStatus


def api_url() -> str:
    return os.environ.get("TETHER_API_URL", DEFAULT_API_URL)


def connect() -> TetherClient:
    """The brain's API as this user: `TETHER_TOKEN`, else the operator token."""
    return TetherClient(api_url(), token=client_token())


async def run_prompt(args: argparse.Namespace) -> int:
    options = {
        k: v
        for k, v in (
            ("provider", args.provider),
            ("model", args.model),
            ("max_steps", args.max_steps),
        )
        if v
    }
    async with connect() as client:
        accepted = await client.start_run(args.prompt, **options)
        return await follow(client, accepted.run_id)


async def follow(client: TetherClient, run_id: str, after: int = 0) -> int:
    """Print the run's events (after `after`) to its end, offering approval cards on a
    terminal; exit 0 when it completed."""
    status = None
    async for event in client.events(run_id, after=after):
        line = render(event)
        if line:
            print(line, flush=True)
        if event.kind == "tool.approval_needed":
            await offer_approval(event.data)
        if event.kind == "run.end":
            status = str(event.data.get("status"))
    if status is None:  # its end was at or before `after`
        status = (await client.get_run(run_id)).status
    return 0 if status == "completed" else 1


async def runs_follow(args: argparse.Namespace) -> int:
    async with connect() as client:
        return await follow(client, args.run_id, args.after)


async def runs_list(args: argparse.Namespace) -> int:
    async with connect() as client:
        found = await client.list_runs(status=args.status, limit=args.limit)
    for run in found.runs:
        prompt = " ".join(run.prompt.split())[:60]
        print(
            f"{run.run_id}  {run.status:17} step {run.step:<3} "
            f"{run.created_at:%Y-%m-%d %H:%M:%S}  {prompt}"
        )
    if not found.runs:
        print("no runs" + (f" with status {args.status}" if args.status else ""))
    return 0


async def runs_show(args: argparse.Namespace) -> int:
    async with connect() as client:
        run = await client.get_run(args.run_id)
    print(run.model_dump_json(indent=2))
    return 0


async def runs_stop(args: argparse.Namespace) -> int:
    async with connect() as client:
        accepted = await client.stop_run(args.run_id)
    print(f"{accepted.run_id}: {accepted.status}")
    return 0


async def tools_list(_args: argparse.Namespace) -> int:
    async with connect() as client:
        for tool in await client.tools():
            print(
                f"{tool.name:16} scope={tool.scope:7} reach={tool.reach:9} {tool.description[:70]}"
            )
    return 0


async def up(_args: argparse.Namespace) -> int:
    from tether_client.up import up as start_everything

    return await start_everything()


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tether", description="Drive a Tether system.")
    sub = root.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start NATS, PostgreSQL and every service").set_defaults(fn=up)
    run = sub.add_parser("run", help="start a run and stream its events")
    run.add_argument("prompt")
    run.add_argument("--provider")
    run.add_argument("--model")
    run.add_argument("--max-steps", type=int)
    run.set_defaults(fn=run_prompt)
    runs = sub.add_parser("runs", help="inspect or stop runs").add_subparsers(
        dest="action", required=True
    )
    listing = runs.add_parser("list", help="the newest runs first")
    listing.add_argument("--status", choices=get_args(RunStatus))
    listing.add_argument("--limit", type=int, default=20)
    listing.set_defaults(fn=runs_list)
    follow_run = runs.add_parser("follow", help="print a run's events to its end")
    follow_run.add_argument("run_id")
    follow_run.add_argument("--after", type=int, default=0, help="skip events up to this seq")
    follow_run.set_defaults(fn=runs_follow)
    show = runs.add_parser("show")
    show.add_argument("run_id")
    show.set_defaults(fn=runs_show)
    stop = runs.add_parser("stop")
    stop.add_argument("run_id")
    stop.set_defaults(fn=runs_stop)
    add_skills_commands(sub, api_url)
    add_ops_commands(sub, api_url)
    add_tokens_commands(sub, api_url)
    add_agents_commands(sub, api_url)
    add_webhooks_commands(sub)
    tools = sub.add_parser("tools", help="the tool catalogue").add_subparsers(
        dest="action", required=True
    )
    tools.add_parser("list").set_defaults(fn=tools_list)
    add_tools_run(tools, api_url)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(asyncio.run(args.fn(args)))
    except TetherError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"error: cannot reach Tether at {api_url()}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
