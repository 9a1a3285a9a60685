"""`tether webhooks list|create|delete|deliveries|retry`: where approval notices go,
through the approvals service's `/v1/webhooks` (`TETHER_APPROVALS_URL`; a token that may
`webhooks.manage`: `TETHER_TOKEN` or the operator token)."""

from __future__ import annotations

import argparse
from typing import Any

import httpx

from tether_client.client import raise_for_error
from tether_client.ops_cli import approvals_url, client_token, say
from tether_common.messages.approvals import NOTICE_KINDS

__all__ = ["add_subcommands", "webhooks_call"]


async def webhooks_call(method: str, path: str, **kwargs: Any) -> Any:
    token = client_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=approvals_url(), headers=headers, timeout=30) as http:
        response = await http.request(method, "/v1/webhooks" + path, **kwargs)
    raise_for_error(response)
    return response.json()


def endpoint_line(endpoint: dict[str, Any]) -> str:
    events = ",".join(e.removeprefix("approval.") for e in endpoint["events"])
    return "  ".join([endpoint["endpoint_id"], f"{endpoint['tenant']:12}", events, endpoint["url"]])


def delivery_line(row: dict[str, Any]) -> str:
    where = row["endpoint_id"] or "nats"
    return "  ".join(
        [
            row["delivery_id"],
            f"{row['status']:9}",
            f"{row['kind']:18}",
            row["approval_id"],
            where,
            f"attempts={row['attempts']}",
            row["last_error"] or "",
        ]
    ).rstrip()


async def webhooks_list(_args: argparse.Namespace) -> int:
    found = (await webhooks_call("GET", ""))["endpoints"]
    for endpoint in found:
        say(endpoint_line(endpoint))
    if not found:
        say("no webhooks")
    return 0


async def webhooks_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"url": args.url}
    if args.events:
        body["events"] = [f"approval.{e}" for e in args.events.split(",") if e.strip()]
    if args.tenant:
        body["tenant"] = args.tenant
    if args.description:
        body["description"] = args.description
    created = await webhooks_call("POST", "", json=body)
    say(endpoint_line(created["endpoint"]))
    # The only time the secret is shown: on a line of its own, easy to copy or pipe.
    say(created["secret"])
    return 0


async def webhooks_delete(args: argparse.Namespace) -> int:
    say(endpoint_line(await webhooks_call("DELETE", f"/{args.endpoint_id}")))
    return 0


async def webhooks_deliveries(args: argparse.Namespace) -> int:
    params = {"limit": str(args.limit)} | ({"status": args.status} if args.status else {})
    found = (await webhooks_call("GET", "/deliveries", params=params))["deliveries"]
    for row in found:
        say(delivery_line(row))
    if not found:
        say("no deliveries")
    return 0


async def webhooks_retry(args: argparse.Namespace) -> int:
    say(delivery_line(await webhooks_call("POST", f"/deliveries/{args.delivery_id}/retry")))
    return 0


def add_subcommands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `webhooks list|create|delete|deliveries|retry` on the `tether` parser."""
    hooks = sub.add_parser(
        "webhooks", help="where approval notices are sent (operators, admins)"
    ).add_subparsers(dest="action", required=True)
    hooks.add_parser("list", help="this tenant's endpoints").set_defaults(fn=webhooks_list)
    kinds = ",".join(k.removeprefix("approval.") for k in NOTICE_KINDS)
    create = hooks.add_parser("create", help="add an endpoint; its secret is printed once")
    create.add_argument("url", help="http(s) URL that receives the signed POSTs")
    create.add_argument("--events", help=f"comma-separated among {kinds} (default: all)")
    create.add_argument("--tenant", help="default: the token's tenant")
    create.add_argument("--description")
    create.set_defaults(fn=webhooks_create)
    delete = hooks.add_parser("delete", help="remove an endpoint and its unsent deliveries")
    delete.add_argument("endpoint_id")
    delete.set_defaults(fn=webhooks_delete)
    deliveries = hooks.add_parser("deliveries", help="newest first; --status dead: dead letters")
    deliveries.add_argument("--status", choices=["pending", "delivered", "dead"])
    deliveries.add_argument("--limit", type=int, default=50)
    deliveries.set_defaults(fn=webhooks_deliveries)
    retry = hooks.add_parser("retry", help="send a dead delivery again")
    retry.add_argument("delivery_id")
    retry.set_defaults(fn=webhooks_retry)
