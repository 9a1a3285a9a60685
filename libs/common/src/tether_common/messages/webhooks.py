"""The approvals service's webhooks API (`/v1/webhooks`): an endpoint that receives approval
notices and (if it chooses them) run notices, the deliveries to it, as the service answers
them and the client reads them, and the run notice's body (`RunNotice`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from tether_common.messages.approvals import NOTICE_KINDS, NoticeKind
from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest
from tether_common.messages.runs import RunEvent

DeliveryStatus = Literal["pending", "delivered", "dead"]
# A run's end (`stopped`: by a person, a limit or a kill switch) and each of its parks for
# an operator's approval, told to the endpoints of its tenant that chose them.
RunNoticeKind = Literal["run.completed", "run.failed", "run.stopped", "run.awaiting_approval"]
RUN_NOTICE_KINDS: tuple[RunNoticeKind, ...] = (
    "run.completed",
    "run.failed",
    "run.stopped",
    "run.awaiting_approval",
)
EventKind = NoticeKind | RunNoticeKind
_ENDED: dict[str, RunNoticeKind] = {
    "completed": "run.completed",
    "failed": "run.failed",
    "stopped": "run.stopped",
}


def notice_kind(event: RunEvent) -> RunNoticeKind | None:
    """The run notice an event makes (None: it makes none). Only top-level runs are told
    of: a helper's end is its parent's business. The brain publishes each such event a
    second time on `Subjects.run_notable` for the approvals service, which tells them."""
    if event.data.get("depth"):
        return None
    if event.kind == "run.end":
        return _ENDED.get(str(event.data.get("status")))
    if event.kind == "tool.approval_needed" and event.data.get("approval_id"):
        return "run.awaiting_approval"
    return None


# A run notice's answer is cut here (the run's whole answer is at the brain's API).
RUN_ANSWER_CHARS = 2000


def _approval_kinds() -> list[EventKind]:
    return list(NOTICE_KINDS)


class RunCard(WireModel):
    """What a run notice says of the run; `links.view` opens it in the console (the
    approval's card for `run.awaiting_approval`)."""

    run_id: str
    tenant: str
    status: str
    agent: str | None = None
    stop_reason: str | None = None
    answer: str | None = None
    steps: int = 0
    usage: dict[str, Any] = Field(default_factory=dict)
    approval_id: str | None = None
    tool: str | None = None
    view: str | None = None


class RunNotice(WireModel):
    """One run notice's webhook body (signed like an approval notice). `notice_id` (also
    the `Tether-Delivery` header) is the same for the same run and event wherever and
    however often it is sent: `<run>` and the kind, and the approval for a park."""

    notice_id: str
    kind: RunNoticeKind
    ts: datetime
    run: RunCard


class CreateWebhook(WireRequest):
    """`POST /v1/webhooks`. `secret`: None lets the server generate one (recommended)."""

    url: str = Field(min_length=8, max_length=2000)
    # The approval notices unless it chooses; run notices only when chosen.
    events: list[EventKind] = Field(default_factory=lambda: _approval_kinds(), min_length=1)
    # None: the caller's own tenant.
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    secret: str | None = Field(default=None, min_length=24, max_length=200)
    description: str | None = Field(default=None, max_length=500)


class WebhookView(WireModel):
    """An endpoint as listed: never its secret."""

    endpoint_id: str
    tenant: str
    url: str
    events: list[EventKind]
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
    kind: EventKind
    approval_id: str | None = None  # None for a run notice that is not about a park
    run_id: str | None = None  # set for a run notice
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
