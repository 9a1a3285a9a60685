"""Webhook endpoints as resources, and their deliveries (served by `api.webhooks`:
`GET|POST /v1/webhooks`, `DELETE /v1/webhooks/{endpoint_id}`, `GET /v1/webhooks/deliveries`
(`?status=dead`: the dead-letter list) and `POST /v1/webhooks/deliveries/{delivery_id}/retry`).

Every route needs `webhooks.manage` (operators of the tenant, admins of all); another
tenant's endpoint or delivery answers 404. The secret is generated here (or given by the
operator), answered once on creation and never again; nothing logs it. Only http(s)
URLs to public receivers, without credentials, are taken, unless the deployment names
private ones (`destinations`). A delivery's failure class (`http_401`, `ConnectError`)
is shown to admins only: to a tenant operator it would map what answers where, so
theirs read `failed`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.notices.destinations import Destinations
from tether_approvals.notices.signing import new_secret
from tether_approvals.persistence.tables import notice_outbox, webhook_endpoints
from tether_approvals.settings import WebhookSettings
from tether_common.errors import ConflictError, NotFoundError
from tether_common.identity import Principal
from tether_common.messages.webhooks import (
    CreateWebhook,
    DeliveryList,
    DeliveryStatus,
    DeliveryView,
    WebhookCreated,
    WebhookList,
    WebhookView,
)

# The wire models live in tether_common.messages.webhooks (the client reads them too).
__all__ = [
    "CreateWebhook",
    "DeliveryList",
    "DeliveryStatus",
    "DeliveryView",
    "WebhookCreated",
    "WebhookList",
    "WebhookStore",
    "WebhookView",
]


def _endpoint(row: Any) -> WebhookView:
    return WebhookView.model_validate(row, from_attributes=True)


FAILED = "failed"


def _delivery(row: Any, who: Principal) -> DeliveryView:
    """A delivery as `who` may see it: the failure's class for admins, `failed` for others."""
    view = DeliveryView.model_validate(row, from_attributes=True)
    if view.last_error is None or who.reach_of("webhooks.manage") == "all":
        return view
    return view.model_copy(update={"last_error": FAILED})


class WebhookStore:
    def __init__(self, engine: AsyncEngine, settings: WebhookSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.destinations = Destinations(settings)

    async def create(self, who: Principal, body: CreateWebhook) -> WebhookCreated:
        tenant = body.tenant or who.tenant
        who.require("webhooks.manage", tenant=tenant)
        values = {
            "endpoint_id": f"whk_{uuid.uuid4().hex}",
            "tenant": tenant,
            "url": self.destinations.registered(body.url),
            "secret": body.secret or new_secret(),
            "events": sorted(set(body.events)),
            # The endpoint hears what its creator may read, never more.
            "agents": None if who.agents is None else sorted(who.agents),
            "owners": None if who.owners is None else sorted(who.owners),
            "description": body.description,
            "created_at": datetime.now(UTC),
            "created_by": who.label,
        }
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    webhook_endpoints.insert()
                    .values(values)
                    .returning(*[c for c in webhook_endpoints.c if c.name != "secret"])
                )
            ).one()
        return WebhookCreated(secret=values["secret"], endpoint=_endpoint(row))

    async def all(self, who: Principal) -> WebhookList:
        reach = who.reach("webhooks.manage")
        stmt = select(webhook_endpoints).order_by(webhook_endpoints.c.created_at)
        if reach.tenant is not None:
            stmt = stmt.where(webhook_endpoints.c.tenant == reach.tenant)
        async with self.engine.connect() as conn:
            return WebhookList(endpoints=[_endpoint(r) for r in await conn.execute(stmt)])

    async def remove(self, who: Principal, endpoint_id: str) -> WebhookView:
        """Delete an endpoint; its undelivered notices go with it."""
        who.require("webhooks.manage")
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(webhook_endpoints)
                    .where(webhook_endpoints.c.endpoint_id == endpoint_id)
                    .with_for_update()
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no webhook '{endpoint_id}'")
            who.require("webhooks.manage", tenant=row.tenant)
            await conn.execute(
                delete(webhook_endpoints).where(webhook_endpoints.c.endpoint_id == endpoint_id)
            )
        return _endpoint(row)

    async def deliveries(
        self, who: Principal, status: DeliveryStatus | None, limit: int
    ) -> DeliveryList:
        reach = who.reach("webhooks.manage")
        stmt = select(notice_outbox).order_by(notice_outbox.c.created_at.desc()).limit(limit)
        if reach.tenant is not None:
            stmt = stmt.where(notice_outbox.c.tenant == reach.tenant)
        if status is not None:
            stmt = stmt.where(notice_outbox.c.status == status)
        async with self.engine.connect() as conn:
            rows = await conn.execute(stmt)
            return DeliveryList(deliveries=[_delivery(r, who) for r in rows])

    async def retry(self, who: Principal, delivery_id: str) -> DeliveryView:
        """Send a dead delivery again, with a fresh set of attempts (409 unless dead)."""
        who.require("webhooks.manage")
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(notice_outbox)
                    .where(notice_outbox.c.delivery_id == delivery_id)
                    .with_for_update()
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no delivery '{delivery_id}'")
            who.require("webhooks.manage", tenant=row.tenant)
            if row.status != "dead":
                raise ConflictError(f"delivery '{delivery_id}' is {row.status}", code=row.status)
            fresh = {
                "status": "pending",
                "attempts": 0,
                "next_attempt_at": now,
                "give_up_at": now + timedelta(seconds=self.settings.max_age_s),
            }
            updated = (
                await conn.execute(
                    update(notice_outbox)
                    .where(notice_outbox.c.delivery_id == delivery_id)
                    .values(fresh)
                    .returning(notice_outbox)
                )
            ).one()
        return _delivery(updated, who)
