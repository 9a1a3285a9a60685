"""The webhook endpoints' routes (`tether_approvals.notices.webhooks` holds them):
`GET|POST /v1/webhooks`, `DELETE /v1/webhooks/{endpoint_id}`, `GET /v1/webhooks/deliveries`
(`?status=dead`: the dead-letter list) and `POST /v1/webhooks/deliveries/{delivery_id}/retry`.
Every route needs `webhooks.manage`; another tenant's endpoint or delivery answers 404."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from tether_approvals.api.deps import Caller, Webhooks
from tether_common.http import PathId
from tether_common.messages.webhooks import (
    CreateWebhook,
    DeliveryList,
    DeliveryStatus,
    DeliveryView,
    WebhookCreated,
    WebhookList,
    WebhookView,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


@router.get("")
async def list_webhooks(store: Webhooks, who: Caller) -> WebhookList:
    return await store.all(who)


@router.post("", status_code=201)
async def create_webhook(body: CreateWebhook, store: Webhooks, who: Caller) -> WebhookCreated:
    """Register an endpoint; the answer holds its secret, the only time it is shown."""
    return await store.create(who, body)


@router.get("/deliveries")
async def list_deliveries(
    store: Webhooks,
    who: Caller,
    status: DeliveryStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeliveryList:
    """Newest first; `status=dead` is the dead-letter list."""
    return await store.deliveries(who, status, limit)


@router.post("/deliveries/{delivery_id}/retry")
async def retry_delivery(delivery_id: PathId, store: Webhooks, who: Caller) -> DeliveryView:
    return await store.retry(who, delivery_id)


@router.delete("/{endpoint_id}")
async def delete_webhook(endpoint_id: PathId, store: Webhooks, who: Caller) -> WebhookView:
    return await store.remove(who, endpoint_id)
