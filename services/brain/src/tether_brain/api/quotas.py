"""A tenant's quota over HTTP: `GET /v1/quotas/{tenant}` (admins, and the tenant's
operators: its limits and what is used of them now) and `PUT /v1/quotas/{tenant}`
(admins only: a tenant never raises its own). Kept as the tenant's `quota` policy
document: versioned (`ETag`, `If-Match` or `version`), every change audited in the
`policy` trail (`quota.changed`). An agent's quota is its definition's (`/v1/agents`).
What a quota does is `agents.quotas`'."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from tether_brain.agents.store import Kind, StoredDocument
from tether_brain.api.agents import expected_version
from tether_brain.api.deps import AgentStoreDep, QuotasDep
from tether_common.errors import AuthError, ErrorCode
from tether_common.http import PathId
from tether_common.identity.http import Caller
from tether_common.messages.quotas import Quota, QuotaBody, QuotaUse, QuotaView

KIND: Kind = "quota"

router = APIRouter(prefix="/v1", tags=["quotas"])


def _view(found: StoredDocument, usage: list[QuotaUse], response: Response) -> QuotaView:
    response.headers["ETag"] = f'"{found.version}"'
    return QuotaView(
        tenant=found.scope,
        quota=Quota.model_validate(found.body),
        version=found.version,
        changed_by=found.changed_by,
        changed_at=found.changed_at,
        usage=usage,
    )


@router.get("/quotas/{tenant}")
async def get_quota(
    tenant: PathId, response: Response, store: AgentStoreDep, quotas: QuotasDep, who: Caller
) -> QuotaView:
    """The tenant's quota (version 0: never set) and its use now."""
    who.require("policy.read", tenant)  # another tenant's: 404, as if missing
    found = await store.document(KIND, tenant)
    _quota, usage = await quotas.of_tenant(tenant)
    return _view(found, usage, response)


@router.put("/quotas/{tenant}")
async def put_quota(
    tenant: PathId,
    body: QuotaBody,
    response: Response,
    store: AgentStoreDep,
    quotas: QuotasDep,
    who: Caller,
    if_match: Annotated[str | None, Header()] = None,
) -> QuotaView:
    """Replace the tenant's quota (a limit left out is none); in force for the next
    start on every replica. 409 `version_conflict` on a stale version."""
    who.require("policy.write", tenant)
    if who.reach_of("policy.write") != "all":
        raise AuthError("only an admin sets a tenant's quota", code=ErrorCode.FORBIDDEN)
    expected = expected_version(if_match, body.version)
    stored = body.quota.model_dump(mode="json", exclude_none=True)
    found = await store.change_document(KIND, tenant, stored, who.label, expected=expected)
    _quota, usage = await quotas.of_tenant(tenant)
    return _view(found, usage, response)
