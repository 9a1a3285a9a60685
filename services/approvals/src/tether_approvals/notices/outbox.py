"""The notice outbox: every request, decision, expiry and withdrawal becomes one row per
webhook endpoint of its tenant (and one for the NATS subject `approval_notices`),
inserted in the transaction that made the change, so a notice is never lost when the
service dies; a sender on every replica delivers them. An endpoint hears the changes
made once it exists, to older requests too (a receiver may be told of the decision or
expiry of a request it never saw asked).

Replicas share the work: a sender claims due rows with `FOR UPDATE SKIP LOCKED` and
moves their next attempt a claim period ahead before it sends, outside the transaction;
a replica that dies mid-send leaves rows that fall due again (at least once: receivers
drop a `Tether-Delivery` id they already handled). A failed attempt is retried with
exponential back-off and jitter until the attempts or the time run out; the row is then
`dead`, listed by the API and re-sendable, never dropped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import httpx
from sqlalchemy import and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.notices.cards import NOTICE_OF, notice
from tether_approvals.notices.destinations import Destinations
from tether_approvals.notices.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, sign
from tether_approvals.persistence.statements import ENDPOINTS
from tether_approvals.persistence.tables import notice_outbox, webhook_endpoints
from tether_approvals.settings import WebhookSettings
from tether_common.background import FailureLog, every
from tether_common.errors import BlockedDestination
from tether_common.messages.approvals import ApprovalNotice, ApprovalView, EventKind
from tether_common.messages.base import decode
from tether_common.retrying import Policy, delay_s
from tether_common.safety import Resolver, system_resolver

__all__ = ["Claimed", "NoticePublisher", "Notices", "Sender", "backoff_s"]

log = logging.getLogger(__name__)

NoticePublisher = Callable[[str, ApprovalNotice], Awaitable[None]]
Sink = Literal["webhook", "nats"]


class Notices:
    """Writes the outbox rows of one change, inside the caller's transaction."""

    def __init__(self, link_base: str, settings: WebhookSettings, subject: str) -> None:
        self.link_base = link_base
        self.settings = settings
        self.subject = subject

    async def record(self, conn: AsyncConnection, kind: EventKind, item: ApprovalView) -> None:
        if rows := await self.rows(conn, kind, item):
            await conn.execute(notice_outbox.insert(), rows)

    async def rows(
        self, conn: AsyncConnection, kind: EventKind, item: ApprovalView
    ) -> list[dict[str, Any]]:
        """The outbox rows of one change (none for a change nobody is told of), for the
        caller to insert in the same transaction: `record`, or a statement writing all of
        a change's rows at once."""
        notice_kind = NOTICE_OF[kind]
        if notice_kind is None:
            return []
        told = notice(notice_kind, item, self.link_base)
        found = await conn.execute(ENDPOINTS, {"p_tenant": item.tenant, "p_kinds": [notice_kind]})
        endpoints = [row.endpoint_id for row in found if _covers(row, item)]
        now = datetime.now(UTC)
        common = {
            "notice_id": told.notice_id,
            "tenant": item.tenant,
            "kind": notice_kind,
            "approval_id": item.approval_id,
            "body": told.model_dump_json(),
            "status": "pending",
            "attempts": 0,
            "next_attempt_at": now,
            "give_up_at": now + timedelta(seconds=self.settings.max_age_s),
            "created_at": now,
        }
        rows: list[dict[str, Any]] = [
            common
            | {"delivery_id": _delivery_id(), "sink": "webhook", "endpoint_id": e}
            | {"subject": None}
            for e in endpoints
        ]
        nats = {"delivery_id": _delivery_id(), "sink": "nats", "subject": self.subject}
        rows.append(common | nats | {"endpoint_id": None})
        return rows


def _covers(endpoint: Any, item: ApprovalView) -> bool:
    """The endpoint's team scope (its creator's) admits this request's agent and owner."""
    if endpoint.agents is not None and item.agent not in endpoint.agents:
        return False
    return endpoint.owners is None or item.owner in endpoint.owners


def _delivery_id() -> str:
    return f"dlv_{uuid.uuid4().hex}"


def backoff_s(attempts: int, base_s: float, max_s: float) -> float:
    """The common back-off after `attempts` failures, jittered over its upper half
    (receivers coming back are not hit by every replica's retries at once)."""
    return delay_s(Policy("notice delivery", base_s, max_s), attempts)


@dataclass(frozen=True, slots=True)
class Claimed:
    delivery_id: str
    notice_id: str
    sink: str
    subject: str | None
    kind: str
    endpoint_id: str | None
    body: str
    attempts: int
    give_up_at: datetime
    url: str | None
    secret: str | None


class Sender:
    """Delivers due outbox rows: webhooks as signed POSTs, NATS notices on the subject."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: WebhookSettings,
        publish: NoticePublisher,
        client: httpx.AsyncClient | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.publish = publish
        self.destinations = Destinations(settings, resolver)
        # No redirects (a receiver cannot send the signed body elsewhere), no proxies from
        # the environment (a local receiver must not go through one), and no connection
        # kept: requests go to pinned addresses, and a pooled TLS connection checked for one
        # name would carry another name's delivery to the same address unchecked.
        self.client = client or httpx.AsyncClient(
            timeout=settings.timeout_s,
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def run_forever(self) -> None:
        await every(self.settings.poll_s, self.tick, FailureLog(log, "the notice sender"))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def tick(self) -> int:
        """Claim and send one batch of due rows; returns how many were attempted."""
        claimed = await self._claim()
        errors = await asyncio.gather(*(self._send(c) for c in claimed))
        for item, error in zip(claimed, errors, strict=True):
            await self._settle(item, error)
        return len(claimed)

    async def _claim(self) -> list[Claimed]:
        now = datetime.now(UTC)
        joined = notice_outbox.outerjoin(
            webhook_endpoints, webhook_endpoints.c.endpoint_id == notice_outbox.c.endpoint_id
        )
        stmt = (
            select(notice_outbox, webhook_endpoints.c.url, webhook_endpoints.c.secret)
            .select_from(joined)
            .where(
                and_(notice_outbox.c.status == "pending", notice_outbox.c.next_attempt_at <= now)
            )
            .order_by(notice_outbox.c.next_attempt_at)
            .limit(self.settings.batch)
            .with_for_update(skip_locked=True, of=notice_outbox)
        )
        async with self.engine.begin() as conn:
            rows = list(await conn.execute(stmt))
            if not rows:
                return []
            await conn.execute(
                update(notice_outbox)
                .where(notice_outbox.c.delivery_id.in_([r.delivery_id for r in rows]))
                .values(
                    attempts=notice_outbox.c.attempts + 1,
                    last_attempt_at=now,
                    next_attempt_at=now + timedelta(seconds=self.settings.claim_s),
                )
            )
        return [
            Claimed(
                r.delivery_id,
                r.notice_id,
                r.sink,
                r.subject,
                r.kind,
                r.endpoint_id,
                r.body,
                r.attempts + 1,
                r.give_up_at,
                r.url,
                r.secret,
            )
            for r in rows
        ]

    async def _send(self, item: Claimed) -> str | None:
        """None when delivered, else a short reason (never the URL or the secret)."""
        if item.sink == "nats":
            if item.subject is None:
                return "subject_missing"
            try:
                await self.publish(item.subject, decode(ApprovalNotice, item.body.encode()))
            except Exception as exc:
                return type(exc).__name__
            return None
        if item.url is None or item.secret is None:
            return "endpoint_missing"
        try:
            # Resolved, checked and pinned at each delivery: the receiver's DNS or the
            # deployment's private hosts may have changed since it was registered.
            pinned = await asyncio.to_thread(self.destinations.pinned, item.url)
        except BlockedDestination as exc:
            return exc.code  # `blocked_destination` or `dns_failed`, never the address
        body = item.body.encode()
        headers = pinned.headers | {
            "Content-Type": "application/json",
            "User-Agent": "tether-approvals",
            SIGNATURE_HEADER: sign(item.secret, body),
            DELIVERY_HEADER: item.notice_id,
            EVENT_HEADER: item.kind,
        }
        try:
            response = await self.client.post(
                pinned.url, content=body, headers=headers, extensions=pinned.extensions
            )
        except httpx.HTTPError as exc:
            # The exception's text may hold the URL, which may itself be a credential
            # (chat tools' incoming-webhook URLs are): only its kind is kept.
            return type(exc).__name__
        if 200 <= response.status_code < 300:
            return None
        return f"http_{response.status_code}"

    async def _settle(self, item: Claimed, error: str | None) -> None:
        now = datetime.now(UTC)
        values: dict[str, Any]
        if error is None:
            values = {"status": "delivered", "delivered_at": now, "last_error": None}
        elif item.attempts >= self.settings.attempts or now >= item.give_up_at:
            values = {"status": "dead", "last_error": error}
            log.warning(
                "notice delivery %s (%s to endpoint %s) is dead after %d attempts: %s",
                item.delivery_id,
                item.kind,
                item.endpoint_id,
                item.attempts,
                error,
            )
        else:
            wait = backoff_s(item.attempts, self.settings.backoff_s, self.settings.backoff_max_s)
            values = {"last_error": error, "next_attempt_at": now + timedelta(seconds=wait)}
        async with self.engine.begin() as conn:
            await conn.execute(
                update(notice_outbox)
                .where(
                    notice_outbox.c.delivery_id == item.delivery_id,
                    notice_outbox.c.status == "pending",
                )
                .values(**values)
            )
