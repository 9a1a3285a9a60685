"""The operator API over HTTP: every route needs a bearer token (tether_common.identity;
`/v1/tokens` is the shared router, mounted in app.py); a request outside the token's team
scope answers 404, exactly like one that does not exist."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Header, Query
from sqlalchemy.ext.asyncio import AsyncEngine
from sse_starlette import EventSourceResponse

from tether_approvals.auth import TOKENS_TRAIL, Principal, TokenStore
from tether_approvals.lifecycle import Lifecycle
from tether_approvals.presence import PresenceBoard
from tether_approvals.store import ApprovalStore
from tether_approvals.trail import head_of, run_trail
from tether_common import audit
from tether_common.http import PathId, parse_last_event_id
from tether_common.identity import principal_dependency, tokens_head
from tether_common.messages.approvals import (
    ApprovalEvent,
    ApprovalList,
    ApprovalStatus,
    ApprovalView,
    DecisionBody,
    ListApprovals,
)
from tether_common.messages.audit import AuditProblem, AuditReport
from tether_common.messages.base import ID_PATTERN, CarryableText


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


def add_events_route(
    router: APIRouter, store: ApprovalStore, board: PresenceBoard, who_dep: Any, poll_s: float
) -> None:
    @router.get("/events")
    async def approval_events(
        last_event_id: Annotated[str | None, Header()] = None,
        who: Principal = who_dep,
    ) -> EventSourceResponse:
        """SSE of `created`, `decided`, `expired`, `consumed`, `withdrawn` (the run was
        stopped while it waited); resumable with Last-Event-ID (without it, only events
        from now on)."""
        who.require("approvals.read")
        parsed = parse_last_event_id(last_event_id)
        after = parsed if parsed is not None else await store.last_event_id()

        async def source() -> AsyncIterator[dict[str, str]]:
            async for event in follow(store, board, who, after, poll_s):
                yield {
                    "id": str(event.event_id),
                    "event": event.kind,
                    "data": event.model_dump_json(),
                }

        return EventSourceResponse(source(), ping=15)


def approvals_router(
    store: ApprovalStore,
    lifecycle: Lifecycle,
    tokens: TokenStore,
    board: PresenceBoard,
    poll_s: float = 0.25,
) -> APIRouter:
    router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
    who_dep = principal_dependency(tokens)

    @router.get("")
    async def list_approvals(
        status: ApprovalStatus | Literal["all"] = "pending",
        run_id: CarryableText | None = None,
        agent: CarryableText | None = None,
        owner: CarryableText | None = None,
        id_prefix: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        who: Principal = who_dep,
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
    add_events_route(router, store, board, who_dep, poll_s)

    @router.get("/{approval_id}")
    async def get_approval(approval_id: PathId, who: Principal = who_dep) -> ApprovalView:
        who.require("approvals.read")
        return await store.get(approval_id, who)

    @router.post("/{approval_id}/decision")
    async def decide(
        approval_id: PathId, body: DecisionBody, who: Principal = who_dep
    ) -> ApprovalView:
        """Decide a pending request (approver or admin). 409 `already_decided` or
        `expired`; 422 `delete_not_remembered` for `allow_run`/`allow_chat` on a delete;
        404 for a request outside the token's team scope."""
        return await lifecycle.decide(who, approval_id, body.decision, body.note)

    return router


def audit_router(engine: AsyncEngine, tokens: TokenStore) -> APIRouter:
    """Admin only: check a run's approvals trail (or `_tokens`) against its kept head."""
    router = APIRouter(prefix="/v1/audit", tags=["audit"])
    who_dep = principal_dependency(tokens)

    @router.get("/{run_id}")
    async def verify_trail(run_id: PathId, who: Principal = who_dep) -> AuditReport:
        who.require("audit.read")
        if run_id == TOKENS_TRAIL:
            trail, head = TOKENS_TRAIL, await tokens_head(engine)
        else:
            trail = run_trail(run_id)
            head = await head_of(engine, trail)
        problems = [
            AuditProblem(kind=p.kind, seq=p.seq, detail=p.detail)
            for p in await audit.verify(engine, trail, head)
        ]
        return AuditReport(trail=trail, head=head, intact=not problems, problems=problems)

    return router
