"""The approvals routes the console needs, answered by the brain so that the page talks
to one origin with one token: the pending list, a decision, and the live event stream
(`/v1/approvals…`, the same paths and answers as the approvals service's own API).

Each is a bus request to the approvals service carrying the caller's own bearer token,
which that service checks as it checks its HTTP callers (role, tenant, team scope): the
brain adds no authority of its own and keeps no copy of what it forwards. The live
stream polls `approvals.watch`, which also keeps the operator's presence there, as the
approvals service's own stream does (interactive runs ask whether an approver is here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials
from sse_starlette import EventSourceResponse

from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.http import PathId, parse_last_event_id
from tether_common.identity.http import SCHEME, Caller
from tether_common.messages.approvals import (
    ApprovalEvent,
    ApprovalList,
    ApprovalStatus,
    ApprovalView,
    ApprovalWatch,
    DecideApproval,
    DecisionBody,
    ListApprovals,
    WatchApprovals,
)

log = logging.getLogger(__name__)

APPROVALS_TIMEOUT_S = 10.0
# How often an idle stream asks for new events (the approvals service's own stream
# reads its event log every 0.25 s; one more hop makes half a second plenty).
WATCH_POLL_S = 0.5
LEAVE_TIMEOUT_S = 2.0
# The proxy's name on `app.state` (`console.api.console_state` puts it there).
APPROVALS_PROXY = "approvals_proxy"


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(SCHEME)],
) -> str:
    """The caller's own token, passed on to the approvals service (the principal
    dependency, declared before it on each route, has already verified it)."""
    return "" if credentials is None else credentials.credentials.strip()


class ApprovalsProxy:
    """The approvals service's operator calls over the bus, each with the caller's token."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def find(self, query: ListApprovals) -> ApprovalList:
        return await self.bus.request(
            self.bus.subjects.approval_list, query, timeout=APPROVALS_TIMEOUT_S
        )

    async def of_run(self, run_id: str, token: str) -> ApprovalList:
        return await self.find(ListApprovals(status=None, run_id=run_id, limit=1000, token=token))

    async def decide(self, approval_id: str, body: DecisionBody, token: str) -> ApprovalView:
        req = DecideApproval(
            approval_id=approval_id,
            decision=body.decision,
            note=body.note,
            arguments=body.arguments,
            text=body.text,
            token=token,
        )
        return await self.bus.request(
            self.bus.subjects.approval_decide, req, timeout=APPROVALS_TIMEOUT_S
        )

    async def watch(self, req: WatchApprovals) -> ApprovalWatch:
        return await self.bus.request(
            self.bus.subjects.approval_watch, req, timeout=APPROVALS_TIMEOUT_S
        )

    async def follow(
        self, token: str, first: ApprovalWatch, poll_s: float = WATCH_POLL_S
    ) -> AsyncIterator[ApprovalEvent]:
        """The events of `first` and every later poll, beating the presence session
        when it is due, until the caller goes (the session is left) or the approvals
        service stops answering or refuses the token (the stream ends; the page
        reconnects with Last-Event-ID, and a refused token then meets a 401 here)."""
        seen, beat_at = first, time.monotonic()
        try:
            while True:
                for event in seen.events:
                    yield event
                if not seen.events:
                    await asyncio.sleep(poll_s)
                due = time.monotonic() - beat_at >= seen.heartbeat_s
                after = seen.last_event_id
                req = WatchApprovals(token=token, after=after, session_id=seen.session_id, beat=due)
                seen = await self.watch(req)
                beat_at = time.monotonic() if due else beat_at
        except TetherError as exc:
            log.info("an approvals stream ended: %s (%s)", exc.code, exc)
        finally:
            with anyio.CancelScope(shield=True):  # the page is gone; still drop its presence
                await self._leave(token, seen.session_id)

    async def _leave(self, token: str, session_id: str | None) -> None:
        if session_id is None:
            return
        req = WatchApprovals(token=token, session_id=session_id, leave=True)
        try:
            await self.bus.request(self.bus.subjects.approval_watch, req, timeout=LEAVE_TIMEOUT_S)
        except TetherError as exc:  # the session then ages out (`presence_ttl_s`)
            log.info("an approvals session was not left: %s", exc.code)


async def approvals_proxy(request: Request) -> ApprovalsProxy:
    found: ApprovalsProxy = getattr(request.app.state, APPROVALS_PROXY)
    return found


ProxyDep = Annotated[ApprovalsProxy, Depends(approvals_proxy)]
Token = Annotated[str, Security(bearer_token)]  # after the caller: verified by then

router = APIRouter(prefix="/approvals", tags=["console"])  # under console.api's /v1


@router.get("")
async def list_approvals(
    proxy: ProxyDep,
    who: Caller,
    token: Token,
    status: ApprovalStatus | Literal["all"] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ApprovalList:
    """Requests in the token's reach, oldest first, as the approvals service's
    `GET /v1/approvals` answers them (`approvals.read`; tenant and team scope)."""
    who.require("approvals.read")
    wanted = None if status == "all" else status
    return await proxy.find(ListApprovals(status=wanted, limit=limit, token=token))


# Before nothing that could take "events" for an id: this router has no `/{id}` GET.
@router.get("/events")
async def approval_events(
    proxy: ProxyDep,
    who: Caller,
    token: Token,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """SSE of the requests the token may read (`created`, `voted`, `escalated`,
    `decided`, `expired`, `consumed`, `withdrawn`), resumable with Last-Event-ID
    (without it, only events from now on); while it is open the caller counts as an
    operator present."""
    who.require("approvals.read")
    after = parse_last_event_id(last_event_id)
    first = await proxy.watch(WatchApprovals(token=token, after=after))  # errors: HTTP

    async def source() -> AsyncIterator[dict[str, str]]:
        async for event in proxy.follow(token, first):
            yield {
                "id": str(event.event_id),
                "event": event.kind,
                "data": event.model_dump_json(),
            }

    return EventSourceResponse(source(), ping=15)


@router.post("/{approval_id}/decision")
async def decide(
    approval_id: PathId, body: DecisionBody, proxy: ProxyDep, who: Caller, token: Token
) -> ApprovalView:
    """Decide a pending request, as the approvals service's route does (same answers:
    404 outside the token's reach, 409 `already_decided`/`expired`, 422
    `delete_not_remembered`); the decision is made there, under the caller's token."""
    who.require("approvals.decide")
    return await proxy.decide(approval_id, body, token)
