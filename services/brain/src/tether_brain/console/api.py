"""The console's JSON routes that the brain's API lacked: a run's approval requests, a
decision on one of them, the console's settings, and (from `console.approvals`) the
approvals routes of the Approvals view. Each takes the caller's principal like every
other route (`tether_common.identity`); the parts they use are on `app.state`
(`console_state`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from tether_brain.console import approvals as approvals_routes
from tether_brain.console.approvals import APPROVALS_PROXY, ApprovalsProxy, ProxyDep, Token
from tether_brain.runs.manager import RunManager
from tether_common.errors import NotFoundError
from tether_common.http import PathId
from tether_common.identity.http import Caller
from tether_common.messages.approvals import ApprovalList, ApprovalView, DecisionBody

# The console's parts' name on `app.state`.
CONSOLE = "console"


class ConsoleSettings(BaseModel):
    """What the page needs beyond the API: the tracing UI's page of one trace, an http(s)
    URL with `{trace_id}` and/or `{run_id}` (None: no trace link)."""

    trace_url: str | None


@dataclass(frozen=True, slots=True)
class Console:
    """What the console's own routes use beside the approvals proxy."""

    manager: RunManager
    settings: ConsoleSettings


def console_state(manager: RunManager, *, trace_url: str | None) -> dict[str, object]:
    """The parts the console's JSON routes read from `app.state`, under their names."""
    return {
        CONSOLE: Console(manager, ConsoleSettings(trace_url=trace_url)),
        APPROVALS_PROXY: ApprovalsProxy(manager.bus),
    }


async def console(request: Request) -> Console:
    found: Console = getattr(request.app.state, CONSOLE)
    return found


ConsoleDep = Annotated[Console, Depends(console)]

router = APIRouter(prefix="/v1", tags=["console"])
router.include_router(approvals_routes.router)


@router.get("/console/settings")
async def console_settings(parts: ConsoleDep, who: Caller) -> ConsoleSettings:
    """For any role that reads runs (`runs.read`)."""
    who.require("runs.read")
    return parts.settings


@router.get("/runs/{run_id}/approvals")
async def run_approvals(
    run_id: PathId, parts: ConsoleDep, approvals: ProxyDep, who: Caller, token: Token
) -> ApprovalList:
    """The run's approval requests in every state, oldest first: `runs.read` on the
    run here, then `approvals.read` and the token's team scope at the approvals
    service."""
    await parts.manager.authorize(who, "runs.read", run_id)
    return await approvals.of_run(run_id, token)


@router.post("/runs/{run_id}/approvals/{approval_id}/decision")
async def decide(
    run_id: PathId,
    approval_id: PathId,
    body: DecisionBody,
    parts: ConsoleDep,
    approvals: ProxyDep,
    who: Caller,
    token: Token,
) -> ApprovalView:
    """Decide one of the run's pending requests, as `POST /v1/approvals/{id}/decision`
    does on the approvals service (same answers: 409 `already_decided`/`expired`, 422
    `delete_not_remembered`). The decision is made there, under the caller's own
    token: nothing here can widen who may decide."""
    await parts.manager.authorize(who, "runs.read", run_id)
    who.require("approvals.decide")
    # A request's run never changes, so this check cannot go stale before the decision.
    held = await approvals.of_run(run_id, token)
    if all(a.approval_id != approval_id for a in held.approvals):
        raise NotFoundError(f"no approval '{approval_id}' for run '{run_id}'")
    return await approvals.decide(approval_id, body, token)
