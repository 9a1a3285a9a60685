"""The kill switch over HTTP: `POST /v1/kill` and `POST /v1/kill/lift` (admins only),
`GET /v1/kill` (admins: every kill; a tenant's operators, approvers and viewers: the
kills that apply to it). What each does is `runs.kills.KillSwitch`'s."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tether_brain.api.deps import KillSwitchDep
from tether_common.identity.http import Caller
from tether_common.messages.kills import KillList, KillRequest, KillView, LiftRequest

router = APIRouter(prefix="/v1", tags=["kill"])


@router.post("/kill", status_code=201)
async def kill(
    body: KillRequest, response: Response, kill_switch: KillSwitchDep, who: Caller
) -> KillView:
    """Stop every running run in scope (within one lease, on every replica) and
    refuse new ones with `killed` until lifted. 201: a new kill; 200: one was
    already in force on this target (it is returned as it was)."""
    view, made = await kill_switch.kill(body, who)
    if not made:
        response.status_code = 200
    return view


@router.post("/kill/lift")
async def lift(body: LiftRequest, kill_switch: KillSwitchDep, who: Caller) -> KillView:
    """End the kill in force on this target (404: none); it stays on record."""
    return await kill_switch.lift(body, who)


@router.get("/kill")
async def kills(
    kill_switch: KillSwitchDep,
    who: Caller,
    lifted: Annotated[bool, Query(description="also the lifted kills, on record")] = False,
) -> KillList:
    return await kill_switch.listing(who, lifted=lifted)
