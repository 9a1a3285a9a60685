"""A check of an audit trail against its kept head, as the brain (`GET /v1/audit/{run_id}`)
and the approvals service (the same route, its own trail) answer it."""

from __future__ import annotations

from pydantic import BaseModel


class AuditProblem(BaseModel):
    """`seq`: the record where the chain breaks (None: the trail as a whole)."""

    kind: str
    seq: int | None
    detail: str


class AuditReport(BaseModel):
    trail: str
    head: str | None
    intact: bool
    problems: list[AuditProblem]
