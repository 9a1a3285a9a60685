"""The approvals service's webhooks API (`/v1/webhooks`): an endpoint that receives approval
notices, and the deliveries to it, as the service answers them and the client reads them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from tether_common.messages.approvals import NOTICE_KINDS, NoticeKind
from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest

DeliveryStatus = Literal["pending", "delivered", "dead"]


class CreateWebhook(WireRequest):
    """`POST /v1/webhooks`. `secret`: None lets the server generate one (recommended)."""

    url: str = Field(min_length=8, max_length=2000)
    events: list[NoticeKind] = Field(default_factory=lambda: list(NOTICE_KINDS), min_length=1)
    # None: the caller's own tenant.
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    secret: str | None = Field(default=None, min_length=24, max_length=200)
    description: str | None = Field(default=None, max_length=500)


class WebhookView(WireModel):
    """An endpoint as listed: never its secret."""

    endpoint_id: str
    tenant: str
    url: str
    events: list[NoticeKind]
    agents: list[str] | None = None
    owners: list[str] | None = None
    description: str | None = None
    created_at: datetime
    created_by: str


class WebhookCreated(WireModel):
    """The secret is shown this once; keep it where the receiver verifies signatures."""

    secret: str
    endpoint: WebhookView


class WebhookList(WireModel):
    endpoints: list[WebhookView]


class DeliveryView(WireModel):
    delivery_id: str
    notice_id: str
    sink: Literal["webhook", "nats"]
    endpoint_id: str | None = None
    tenant: str
    kind: NoticeKind
    approval_id: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime
    give_up_at: datetime
    created_at: datetime
    last_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
    # Why the last attempt failed: its class (`http_503`, `ConnectError`,
    # `blocked_destination`) for admins, `failed` for everyone else.
    last_error: str | None = None


class DeliveryList(WireModel):
    deliveries: list[DeliveryView]
