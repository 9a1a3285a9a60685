"""Schedules over HTTP:

    GET|POST /v1/schedules, GET|PUT|DELETE /v1/schedules/{id},
    POST /v1/schedules/{id}/pause, POST /v1/schedules/{id}/resume

Who may, and as whom the runs run, is `schedules.manager`'s. Every answer with one
schedule carries `ETag: "<version>"`; a replacement may send `If-Match` or a
`schedule_version` field, and a stale one is a 409 `version_conflict`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from tether_brain.api.agents import expected_version
from tether_brain.api.deps import ScheduleManagerDep
from tether_common.http import PathId, error_responses
from tether_common.identity.http import Caller
from tether_common.messages.schedules import ScheduleList, ScheduleSpec, ScheduleView

UNAUTHENTICATED = "no valid bearer token (`unauthenticated`, `token_expired`)"
MISSING = "no such schedule for this caller: removed, or out of its reach (`not_found`)"
INVALID = (
    "the body does not validate, or its cron expression, time zone or interval does not "
    "(`invalid_request`)"
)
SET_GOING = error_responses(
    {
        401: UNAUTHENTICATED,
        403: "the role may not manage schedules, or not start this run (`forbidden`)",
        404: MISSING + "; or no such agent for this caller",
        409: "a kill switch covers the run (`killed`), or the version moved on "
        "(`version_conflict`)",
        422: INVALID,
    }
)
READ = error_responses({401: UNAUTHENTICATED, 404: MISSING})


def _tagged(response: Response, found: ScheduleView) -> ScheduleView:
    response.headers["ETag"] = f'"{found.schedule_version}"'
    return found


router = APIRouter(prefix="/v1", tags=["schedules"])


@router.post("/schedules", status_code=201, responses=SET_GOING)
async def add(
    body: ScheduleSpec, response: Response, manager: ScheduleManagerDep, who: Caller
) -> ScheduleView:
    """Add a schedule to the caller's tenant; its runs run as the caller."""
    return _tagged(response, await manager.create(body, who))


@router.get("/schedules", responses=error_responses({401: UNAUTHENTICATED}))
async def listing(manager: ScheduleManagerDep, who: Caller) -> ScheduleList:
    """The schedules within reach, enabled ones soonest first, with their last run."""
    return await manager.list_schedules(who)


@router.get("/schedules/{schedule_id}", responses=READ)
async def show(
    schedule_id: PathId, response: Response, manager: ScheduleManagerDep, who: Caller
) -> ScheduleView:
    return _tagged(response, await manager.get(schedule_id, who))


@router.put("/schedules/{schedule_id}", responses=SET_GOING)
async def replace(
    schedule_id: PathId,
    body: ScheduleSpec,
    response: Response,
    manager: ScheduleManagerDep,
    who: Caller,
    if_match: Annotated[str | None, Header()] = None,
) -> ScheduleView:
    """Replace it (from now on its runs run as the caller)."""
    expected = expected_version(if_match, body.schedule_version)
    return _tagged(response, await manager.replace(schedule_id, body, who, expected))


@router.post("/schedules/{schedule_id}/pause", responses=READ)
async def pause(
    schedule_id: PathId, response: Response, manager: ScheduleManagerDep, who: Caller
) -> ScheduleView:
    """Stop firing; a queued tick is dropped; its running run goes on."""
    return _tagged(response, await manager.pause(schedule_id, who))


@router.post("/schedules/{schedule_id}/resume", responses=SET_GOING)
async def resume(
    schedule_id: PathId, response: Response, manager: ScheduleManagerDep, who: Caller
) -> ScheduleView:
    """Fire again from the next tick after now, as the caller."""
    return _tagged(response, await manager.resume(schedule_id, who))


@router.delete("/schedules/{schedule_id}", status_code=204, response_class=Response, responses=READ)
async def remove(schedule_id: PathId, manager: ScheduleManagerDep, who: Caller) -> Response:
    """Remove it (its runs so far stay as they are)."""
    await manager.remove(schedule_id, who)
    return Response(status_code=204)
