"""The console's JSON routes that the brain's API lacked: a run's approval requests, a
decision on one of them, and the console's settings. Each takes the caller's principal
like every other route (`tether_common.identity`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from tether_brain.runs.manager import RunManager
from tether_common.bus import Bus
from tether_common.errors import NotFoundError
from tether_common.http import PathId
from tether_common.identity import Principal, Verifier, principal_dependency
from tether_common.identity.http import SCHEME
from tether_common.messages.approvals import (
    ApprovalList,
    ApprovalView,
    DecideApproval,
    DecisionBody,
    ListApprovals,
)

APPROVALS_TIMEOUT_S = 10.0


class ConsoleSettings(BaseModel):
    """What the page needs beyond the API: the tracing UI's page of one trace, an http(s)
    URL with `{trace_id}` and/or `{run_id}` (None: no trace link)."""

    trace_url: str | None


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(SCHEME)],
) -> str:
    """The caller's own token, passed on to the approvals service (the principal
    dependency, declared before it on each route, has already verified it)."""
    return "" if credentials is None else credentials.credentials.strip()


class RunApprovals:
    """A run's approval requests at the approvals service, asked with the caller's token:
    its role and team scope apply there exactly as on the approvals service's own API."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def of_run(self, run_id: str, token: str) -> ApprovalList:
        query = ListApprovals(status=None, run_id=run_id, limit=1000, token=token)
        return await self.bus.request(
            self.bus.subjects.approval_list, query, timeout=APPROVALS_TIMEOUT_S
        )

    async def decide(self, approval_id: str, body: DecisionBody, token: str) -> ApprovalView:
        req = DecideApproval(
            approval_id=approval_id, decision=body.decision, note=body.note, token=token
        )
        return await self.bus.request(
            self.bus.subjects.approval_decide, req, timeout=APPROVALS_TIMEOUT_S
        )


def console_api_router(
    manager: RunManager, verifier: Verifier, *, trace_url: str | None
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["console"])
    who_dep = principal_dependency(verifier)
    token_dep = Security(bearer_token)
    approvals = RunApprovals(manager.bus)

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
