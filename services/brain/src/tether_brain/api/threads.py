"""Threads over HTTP (`/v1/threads…`). Every route takes the caller's principal; what it
may do is decided by the `ThreadManager` method it calls, the same one the NATS handler
calls (`app.py`). Errors are `{"error": {code, message}}`, listed per route in OpenAPI."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tether_brain.api.deps import ThreadManagerDep
from tether_common.http import TEXT_BODY_LIMIT, PathId, body_limit, error_responses
from tether_common.identity.http import Caller
from tether_common.messages.threads import (
    CreateThread,
    ListThreads,
    SendThreadMessage,
    ThreadList,
    ThreadMessageBody,
    ThreadTurnAccepted,
    ThreadView,
)

UNAUTHENTICATED = "no valid bearer token (`unauthenticated`, `token_expired`)"
MISSING = "no such thread for this caller: deleted, or out of its reach (`not_found`)"
INVALID = "the body or a parameter does not validate (`invalid_request`)"
QUOTA = "a quota of the tenant or agent is used up (`quota_exceeded`; `Retry-After`)"
READ = error_responses({401: UNAUTHENTICATED, 404: MISSING, 422: INVALID})


router = APIRouter(prefix="/v1", tags=["threads"])


@router.post(
    "/threads",
    status_code=201,
    responses=error_responses(
        {
            401: UNAUTHENTICATED,
            403: "the role may not start runs, or not with this agent, provider or model",
            404: "no such agent for this caller (`not_found`)",
            409: "a kill switch is in force for this tenant or agent (`killed`)",
            422: INVALID,
        }
    ),
)
async def create_thread(body: CreateThread, manager: ThreadManagerDep, who: Caller) -> ThreadView:
    return await manager.create(body, who)


@router.get("/threads", responses=error_responses({401: UNAUTHENTICATED, 422: INVALID}))
async def list_threads(
    query: Annotated[ListThreads, Query()], manager: ThreadManagerDep, who: Caller
) -> ThreadList:
    """Threads within the caller's reach, newest first; page back with `before` = the
    `next` of the previous page."""
    return await manager.list_threads(query, who)


@router.get("/threads/{thread_id}", responses=READ)
async def get_thread(thread_id: PathId, manager: ThreadManagerDep, who: Caller) -> ThreadView:
    return await manager.get(thread_id, who)


@router.post(
    "/threads/{thread_id}/messages",
    status_code=202,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
    responses=error_responses(
        {
            401: UNAUTHENTICATED,
            403: "the role may not post messages or start runs (`forbidden`)",
            404: MISSING,
            409: "the last turn's run has not ended (`thread_busy`), the thread's "
            "budget is spent (`thread_budget_spent`), or a kill switch is in force for "
            "its tenant or agent (`killed`)",
            413: "the body is larger than the route reads (`body_too_large`)",
            429: QUOTA,
            422: INVALID + "; `limit_unenforceable` for a token budget the provider cannot report",
        }
    ),
)
async def post_message(
    thread_id: PathId, body: ThreadMessageBody, manager: ThreadManagerDep, who: Caller
) -> ThreadTurnAccepted:
    """Start the thread's next turn: a run with the thread's history."""
    return await manager.send(SendThreadMessage(thread_id=thread_id, text=body.text), who)


@router.delete(
    "/threads/{thread_id}",
    status_code=204,
    response_class=Response,
    responses=error_responses(
        {401: UNAUTHENTICATED, 403: "the role may not stop runs (`forbidden`)", 404: MISSING}
    ),
)
async def delete_thread(thread_id: PathId, manager: ThreadManagerDep, who: Caller) -> Response:
    """Stop the live turn and mark the thread deleted: it is no longer served."""
    await manager.delete(thread_id, who)
    return Response(status_code=204)
