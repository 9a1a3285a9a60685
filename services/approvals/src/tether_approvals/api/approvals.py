"""The operator API over HTTP: every route needs a bearer token (tether_common.identity;
`/v1/tokens` is the shared router, mounted in app.py); a request outside the token's team
scope answers 404, exactly like one that does not exist."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse

from tether_approvals.api.deps import Board, Caller, Decisions, Store
from tether_approvals.auth import Principal
from tether_approvals.persistence.presence import PresenceBoard
from tether_approvals.persistence.store import ApprovalStore
from tether_common.http import PathId, parse_last_event_id
from tether_common.messages.approvals import (
    ApprovalEvent,
    ApprovalList,
    ApprovalStatus,
    ApprovalView,
    DecisionBody,
    ListApprovals,
)
from tether_common.messages.base import ID_PATTERN, CarryableText

__all__ = ["POLL_S", "follow", "router"]

# How often an open event stream reads the event log.
POLL_S = 0.25

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


async def follow(
    store: ApprovalStore, board: PresenceBoard, who: Principal, after: int, poll_s: float
) -> AsyncIterator[ApprovalEvent]:
    """Events past `after`, then live ones, while keeping this operator's presence fresh.
    Polling the event log (not a local hub) lets any replica serve any operator."""
    session = await board.join(who)
    beat = time.monotonic()
    try:
        while True:
            events, after = await store.events_after(after, who)
            for event in events:
                yield event
            if time.monotonic() - beat > board.heartbeat_s:
                await board.beat(session)
                beat = time.monotonic()
            if not events:
                await asyncio.sleep(poll_s)
    finally:
        with anyio.CancelScope(shield=True):  # the client is gone; still drop its presence
            await board.leave(session)


@router.get("")
async def list_approvals(
    store: Store,
    who: Caller,
    status: ApprovalStatus | Literal["all"] = "pending",
    run_id: CarryableText | None = None,
    agent: CarryableText | None = None,
    owner: CarryableText | None = None,
    id_prefix: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ApprovalList:
    """Requests in the token's scope, oldest first; `id_prefix`: only those whose id
    starts with it (how `tether approvals approve apr_3fa2` finds its one)."""
    who.require("approvals.read")
    wanted = None if status == "all" else status
    query = ListApprovals(
        status=wanted, run_id=run_id, agent=agent, owner=owner, id_prefix=id_prefix, limit=limit
    )
    return ApprovalList(approvals=await store.find(query, who))


# Before `/{approval_id}`, which would otherwise take "events" for an id.
@router.get("/events")
async def approval_events(
    store: Store,
    board: Board,
    who: Caller,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """SSE of `created`, `decided`, `expired`, `consumed`, `withdrawn` (the run was
    stopped while it waited); resumable with Last-Event-ID (without it, only events
    from now on)."""
    who.require("approvals.read")
    parsed = parse_last_event_id(last_event_id)
    after = parsed if parsed is not None else await store.last_event_id()

    async def source() -> AsyncIterator[dict[str, str]]:
        async for event in follow(store, board, who, after, POLL_S):
            yield {"id": str(event.event_id), "event": event.kind, "data": event.model_dump_json()}

    return EventSourceResponse(source(), ping=15)


@router.get("/{approval_id}")
async def get_approval(approval_id: PathId, store: Store, who: Caller) -> ApprovalView:
    who.require("approvals.read")
    return await store.get(approval_id, who)


@router.post("/{approval_id}/decision")
async def decide(
    approval_id: PathId, body: DecisionBody, lifecycle: Decisions, who: Caller
) -> ApprovalView:
    """Decide a pending request (approver or admin). 409 `already_decided` or
    `expired`; 422 `delete_not_remembered` for `allow_run`/`allow_chat` on a delete;
    404 for a request outside the token's team scope. `edit` with `arguments` (422
    `arguments_invalid` when the tool's schema refuses them) runs the call with them,
    gated again by the brain; `respond` with `text` runs nothing and gives the model the
    text as the call's result, marked as the operator's (422 `answer_refused` on a
    request for a quorum or a group)."""
    return await lifecycle.decide(
        who, approval_id, body.decision, body.note, arguments=body.arguments, text=body.text
    )
