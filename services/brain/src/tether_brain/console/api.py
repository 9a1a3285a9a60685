"""The console's JSON routes that the brain's API lacked: a run's approval requests, a
decision on one of them, the console's settings, and (from `console.approvals`) the
approvals routes of the Approvals view. Each takes the caller's principal like every
other route (`tether_common.identity`)."""

from __future__ import annotations

from fastapi import APIRouter, Security
from pydantic import BaseModel

from tether_brain.console.approvals import ApprovalsProxy, approvals_proxy_router, bearer_token
from tether_brain.runs.manager import RunManager
from tether_common.errors import NotFoundError
from tether_common.http import PathId
from tether_common.identity import Principal, Verifier, principal_dependency
from tether_common.messages.approvals import ApprovalList, ApprovalView, DecisionBody


class ConsoleSettings(BaseModel):
    """What the page needs beyond the API: the tracing UI's page of one trace, an http(s)
    URL with `{trace_id}` and/or `{run_id}` (None: no trace link)."""

    trace_url: str | None


def console_api_router(
    manager: RunManager, verifier: Verifier, *, trace_url: str | None
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["console"])
    who_dep = principal_dependency(verifier)
    token_dep = Security(bearer_token)
    approvals = ApprovalsProxy(manager.bus)
    router.include_router(approvals_proxy_router(approvals, verifier))

    @router.get("/console/settings")
    async def console_settings(who: Principal = who_dep) -> ConsoleSettings:
        """For any role that reads runs (`runs.read`)."""
        who.require("runs.read")
        return ConsoleSettings(trace_url=trace_url)

    @router.get("/runs/{run_id}/approvals")
    async def run_approvals(
        run_id: PathId, who: Principal = who_dep, token: str = token_dep
    ) -> ApprovalList:
        """The run's approval requests in every state, oldest first: `runs.read` on the
        run here, then `approvals.read` and the token's team scope at the approvals
        service."""
        await manager.authorize(who, "runs.read", run_id)
        return await approvals.of_run(run_id, token)

    @router.post("/runs/{run_id}/approvals/{approval_id}/decision")
    async def decide(
        run_id: PathId,
        approval_id: PathId,
        body: DecisionBody,
        who: Principal = who_dep,
        token: str = token_dep,
    ) -> ApprovalView:
        """Decide one of the run's pending requests, as `POST /v1/approvals/{id}/decision`
        does on the approvals service (same answers: 409 `already_decided`/`expired`, 422
        `delete_not_remembered`). The decision is made there, under the caller's own
        token: nothing here can widen who may decide."""
        await manager.authorize(who, "runs.read", run_id)
        who.require("approvals.decide")
        # A request's run never changes, so this check cannot go stale before the decision.
        held = await approvals.of_run(run_id, token)
        if all(a.approval_id != approval_id for a in held.approvals):
            raise NotFoundError(f"no approval '{approval_id}' for run '{run_id}'")
        return await approvals.decide(approval_id, body, token)

    return router
