"""What the HTTP routes depend on: the service's parts, which app.py puts on `app.state`
once, and the caller (`tether_common.identity.http.Caller`: authenticated by the token
store `Service.app` holds, with the same scheme and 401s as `principal_dependency`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.decisions.lifecycle import Lifecycle
from tether_approvals.notices.webhooks import WebhookStore
from tether_approvals.persistence.presence import PresenceBoard
from tether_approvals.persistence.store import ApprovalStore
from tether_common.identity.http import Caller

__all__ = [
    "PARTS",
    "Board",
    "Caller",
    "ConsoleUrl",
    "Decisions",
    "Engine",
    "Parts",
    "Store",
    "Webhooks",
]


# The name of the service's parts on `app.state` (app.py gives them to `Service.app`).
PARTS = "approvals"


@dataclass(frozen=True, slots=True)
class Parts:
    """The service's parts a route may use: one set per app, built by app.py."""

    engine: AsyncEngine
    store: ApprovalStore
    lifecycle: Lifecycle
    board: PresenceBoard
    webhooks: WebhookStore
    console_url: str | None


def parts(request: Request) -> Parts:
    found: Parts = getattr(request.app.state, PARTS)
    return found


def approval_store(request: Request) -> ApprovalStore:
    return parts(request).store


def lifecycle(request: Request) -> Lifecycle:
    return parts(request).lifecycle


def presence_board(request: Request) -> PresenceBoard:
    return parts(request).board


def webhook_store(request: Request) -> WebhookStore:
    return parts(request).webhooks


def engine(request: Request) -> AsyncEngine:
    return parts(request).engine


def console_url(request: Request) -> str | None:
    return parts(request).console_url


Store = Annotated[ApprovalStore, Depends(approval_store)]
Decisions = Annotated[Lifecycle, Depends(lifecycle)]
Board = Annotated[PresenceBoard, Depends(presence_board)]
Webhooks = Annotated[WebhookStore, Depends(webhook_store)]
Engine = Annotated[AsyncEngine, Depends(engine)]
ConsoleUrl = Annotated[str | None, Depends(console_url)]
