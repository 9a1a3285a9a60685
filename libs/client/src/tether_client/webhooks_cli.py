"""`tether webhooks list|create|delete|deliveries|retry`: where approval and run notices go,
through the approvals service's `/v1/webhooks` (`TETHER_APPROVALS_URL`; a token that may
`webhooks.manage`: `TETHER_TOKEN` or the operator token)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import httpx
import typer
from pydantic import BaseModel

from tether_client.client import raise_for_error
from tether_client.console import Format, OutputOption, emit, say
from tether_client.endpoints import approvals_url
from tether_client.session import blocking, client_token
from tether_common.messages.approvals import NOTICE_KINDS
from tether_common.messages.webhooks import (
    RUN_NOTICE_KINDS,
    DeliveryList,
    DeliveryView,
    WebhookCreated,
    WebhookList,
    WebhookView,
)

__all__ = ["app", "webhooks_call"]

app = typer.Typer(
    help="Where approval and run notices are sent (operators, admins).", no_args_is_help=True
)
M = TypeVar("M", bound=BaseModel)
# Approval notices by their short names; run notices (chosen only by name) in full.
KINDS = ",".join([*(k.removeprefix("approval.") for k in NOTICE_KINDS), *RUN_NOTICE_KINDS])


async def webhooks_call(model: type[M], method: str, path: str, **kwargs: Any) -> M:
    """One `/v1/webhooks` route, its answer read as `model`."""
    token = client_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=approvals_url(), headers=headers, timeout=30) as http:
        response = await http.request(method, "/v1/webhooks" + path, **kwargs)
    raise_for_error(response)
    return model.model_validate_json(response.content)


def endpoint_line(endpoint: WebhookView) -> str:
    events = ",".join(e.removeprefix("approval.") for e in endpoint.events)
    return "  ".join([endpoint.endpoint_id, f"{endpoint.tenant:12}", events, endpoint.url])


def delivery_line(row: DeliveryView) -> str:
    where = row.endpoint_id or "nats"
    return "  ".join(
        [
            row.delivery_id,
            f"{row.status:9}",
            f"{row.kind:18}",
            row.approval_id or row.run_id or "",
            where,
            f"attempts={row.attempts}",
            row.last_error or "",
        ]
    ).rstrip()


@app.command("list")
@blocking
async def webhooks_list(output: OutputOption = Format.table) -> int:
    """This tenant's endpoints.

    Example: tether webhooks list -o json
    """
    found = (await webhooks_call(WebhookList, "GET", "")).endpoints
    emit(found, output, "\n".join(map(endpoint_line, found)) or "no webhooks")
    return 0


@app.command("create")
@blocking
async def webhooks_create(
    url: Annotated[str, typer.Argument(help="http(s) URL that receives the signed POSTs.")],
    events: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated among {KINDS} (default: every approval notice)."),
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Default: the token's tenant.")] = None,
    description: Annotated[str | None, typer.Option(help="A note for people.")] = None,
) -> int:
    """Add an endpoint; its signing secret is printed once, on a line of its own.

    Example: tether webhooks create https://hooks.example.com/tether --events requested
    """
    body: dict[str, Any] = {"url": url}
    if events:
        named = [e.strip() for e in events.split(",") if e.strip()]
        body["events"] = [e if e.startswith("run.") else f"approval.{e}" for e in named]
    if tenant:
        body["tenant"] = tenant
    if description:
        body["description"] = description
    created = await webhooks_call(WebhookCreated, "POST", "", json=body)
    say(endpoint_line(created.endpoint))
    # The only time the secret is shown: on a line of its own, easy to copy or pipe.
    say(created.secret)
    return 0


@app.command("delete")
@blocking
async def webhooks_delete(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id.", show_default=False)],
) -> int:
    """Remove an endpoint and its unsent deliveries.

    Example: tether webhooks delete whk_1234
    """
    say(endpoint_line(await webhooks_call(WebhookView, "DELETE", f"/{endpoint_id}")))
    return 0


@app.command("deliveries")
@blocking
async def webhooks_deliveries(
    status: Annotated[
        Literal["pending", "delivered", "dead"] | None,
        typer.Option(help="dead: dead letters."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 50,
    output: OutputOption = Format.table,
) -> int:
    """Deliveries, newest first.

    Example: tether webhooks deliveries --status dead
    """
    params = {"limit": str(limit)} | ({"status": status} if status else {})
    found = (await webhooks_call(DeliveryList, "GET", "/deliveries", params=params)).deliveries
    emit(found, output, "\n".join(map(delivery_line, found)) or "no deliveries")
    return 0


@app.command("retry")
@blocking
async def webhooks_retry(
    delivery_id: Annotated[str, typer.Argument(help="A dead delivery's id.", show_default=False)],
) -> int:
    """Send a dead delivery again.

    Example: tether webhooks retry dlv_1234
    """
    retried = await webhooks_call(DeliveryView, "POST", f"/deliveries/{delivery_id}/retry")
    say(delivery_line(retried))
    return 0
