"""Admin only: check a run's approvals trail (or `_tokens`) against its kept head."""

from __future__ import annotations

from fastapi import APIRouter

from tether_approvals.api.deps import Caller, Engine
from tether_approvals.auth import TOKENS_TRAIL
from tether_approvals.persistence.trail import head_of, run_trail
from tether_common import audit
from tether_common.http import PathId
from tether_common.identity import tokens_head
from tether_common.messages.audit import AuditProblem, AuditReport

__all__ = ["router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("/{run_id}")
async def verify_trail(run_id: PathId, engine: Engine, who: Caller) -> AuditReport:
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
