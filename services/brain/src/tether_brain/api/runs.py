"""The brain's client API over HTTP. Every route takes the caller's principal; what it
may do is decided by the `RunManager` method it calls, the same one the NATS handler
calls (`app.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import Field
from sse_starlette import EventSourceResponse

from tether_brain.api.deps import RunManagerDep, ToolboxDep
from tether_common.http import (
    TEXT_BODY_LIMIT,
    PathId,
    body_limit,
    error_responses,
    parse_last_event_id,
)
from tether_common.identity.http import Caller
from tether_common.messages.base import RequestModel
from tether_common.messages.deltas import RunDelta
from tether_common.messages.runs import (
    ListRuns,
    QueueMessage,
    RunAccepted,
    RunList,
    RunView,
    StartRun,
    StopRun,
)
from tether_common.messages.tools import ToolDescriptor


class MessageBody(RequestModel):
    text: str = Field(min_length=1, max_length=200_000)


router = APIRouter(prefix="/v1", tags=["runs"])


@router.post(
    "/runs",
    status_code=201,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
    responses=error_responses(
        {429: "a quota of the tenant or agent is used up (`quota_exceeded`; `Retry-After`)"}
    ),
)
async def start_run(body: StartRun, manager: RunManagerDep, who: Caller) -> RunAccepted:
    """Start a run; 429 `quota_exceeded` (its `details`: which limit, the use, when it
    resets) while a quota of its tenant or agent is used up."""
    return await manager.start(body, who)


@router.get("/runs")
async def list_runs(
    query: Annotated[ListRuns, Query()], manager: RunManagerDep, who: Caller
) -> RunList:
    """Runs within the caller's reach, newest first; page back with `before` = the
    last `created_at` seen."""
    return await manager.list_runs(query, who)


@router.get("/runs/{run_id}")
async def get_run(run_id: PathId, manager: RunManagerDep, who: Caller) -> RunView:
    return await manager.get(run_id, who)


@router.get("/runs/{run_id}/events")
async def run_events(
    run_id: PathId,
    manager: RunManagerDep,
    who: Caller,
    last_event_id: Annotated[str | None, Header()] = None,
    deltas: Annotated[bool, Query(description="interleave the live text (`delta`)")] = True,
) -> EventSourceResponse:
    """The run's durable events (SSE `id` = `seq`, `event` = kind), resumable with
    `Last-Event-ID`, and between them, unless `deltas=false`, the model's text as it
    is written: `event: delta` with a `RunDelta`, and no `id`, so a reconnect
    resumes after the last durable event and misses none. Deltas are not replayed."""
    after = parse_last_event_id(last_event_id) or 0
    await manager.follow(run_id, who)  # 401/404 before the stream starts

    async def source() -> AsyncIterator[dict[str, Any]]:
        async for item in manager.live(run_id, after, deltas=deltas):
            if isinstance(item, RunDelta):
                yield {"event": "delta", "data": item.model_dump_json()}
            else:
                yield {"id": str(item.seq), "event": item.kind, "data": item.model_dump_json()}

    return EventSourceResponse(source(), ping=15)


@router.post("/runs/{run_id}/stop", status_code=202)
async def stop_run(run_id: PathId, manager: RunManagerDep, who: Caller) -> RunAccepted:
    return await manager.stop(StopRun(run_id=run_id), who)


@router.post("/runs/{run_id}/messages", status_code=202, openapi_extra=body_limit(TEXT_BODY_LIMIT))
async def queue_message(
    run_id: PathId, body: MessageBody, manager: RunManagerDep, who: Caller
) -> RunAccepted:
    return await manager.queue_message(QueueMessage(run_id=run_id, text=body.text), who)


@router.get("/runs/{run_id}/outputs/{ref}")
async def download_output(
    run_id: PathId, ref: PathId, manager: RunManagerDep, who: Caller
) -> StreamingResponse:
    """A whole output the run made, for whoever may read the run (`outputs.read`):
    the output-store's own download is for admins, who reach every run."""
    await manager.authorize(who, "outputs.read", run_id)
    first = await manager.read_output(run_id, ref, 0)
    return StreamingResponse(
        manager.output_bytes(run_id, ref, first),
        media_type="application/octet-stream",
        headers={"Content-Length": str(first.size)},
    )


@router.get("/tools")
async def list_tools(toolbox: ToolboxDep, who: Caller) -> list[ToolDescriptor]:
    """The tool catalogue: what an agent may be granted (`agents.read`)."""
    who.require("agents.read")
    return await toolbox.catalog()
