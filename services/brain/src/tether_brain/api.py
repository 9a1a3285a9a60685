"""The brain's client API over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from pydantic import Field
from sse_starlette import EventSourceResponse

from tether_brain.runs import RunManager
from tether_brain.toolbox import Toolbox
from tether_common.http import TEXT_BODY_LIMIT, PathId, body_limit, parse_last_event_id
from tether_common.messages.base import RequestModel
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


def runs_router(manager: RunManager, toolbox: Toolbox) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["runs"])

    @router.post("/runs", status_code=201, openapi_extra=body_limit(TEXT_BODY_LIMIT))
    async def start_run(body: StartRun) -> RunAccepted:
        return await manager.start(body)

    @router.get("/runs")
    async def list_runs(query: Annotated[ListRuns, Query()]) -> RunList:
        """Runs, newest first; page back with `before` = the last `created_at` seen."""
        return await manager.list_runs(query)

    @router.get("/runs/{run_id}")
    async def get_run(run_id: PathId) -> RunView:
        return await manager.get(run_id)

    @router.get("/runs/{run_id}/events")
    async def run_events(
        run_id: PathId, last_event_id: Annotated[str | None, Header()] = None
    ) -> EventSourceResponse:
        after = parse_last_event_id(last_event_id) or 0
        await manager.get(run_id)  # 404 before the stream starts

        async def source() -> AsyncIterator[dict[str, Any]]:
            async for event in manager.events(run_id, after):
                yield {"id": str(event.seq), "event": event.kind, "data": event.model_dump_json()}

        return EventSourceResponse(source(), ping=15)

    @router.post("/runs/{run_id}/stop", status_code=202)
    async def stop_run(run_id: PathId) -> RunAccepted:
        return await manager.stop(StopRun(run_id=run_id))

    @router.post(
        "/runs/{run_id}/messages", status_code=202, openapi_extra=body_limit(TEXT_BODY_LIMIT)
    )
    async def queue_message(run_id: PathId, body: MessageBody) -> RunAccepted:
        return await manager.queue_message(QueueMessage(run_id=run_id, text=body.text))

    @router.get("/tools")
    async def list_tools() -> list[ToolDescriptor]:
        return await toolbox.catalog()

    return router
