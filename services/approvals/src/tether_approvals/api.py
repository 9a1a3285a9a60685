"""The operator API over HTTP: every route but health needs a bearer token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query

from tether_approvals.store import ApprovalStore
from tether_common.http import check_bearer
from tether_common.messages.approvals import ApprovalList, ApprovalStatus, ApprovalView


def approvals_router(store: ApprovalStore, token_hashes: frozenset[str]) -> APIRouter:
    def operator(authorization: Annotated[str | None, Header()] = None) -> str:
        return check_bearer(authorization, token_hashes)

    router = APIRouter(prefix="/v1/approvals", tags=["approvals"], dependencies=[Depends(operator)])

    @router.get("")
    async def list_approvals(
        status: ApprovalStatus | None = "pending",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> ApprovalList:
        return ApprovalList(approvals=await store.list(status, limit))

    @router.get("/{approval_id}")
    async def get_approval(approval_id: str) -> ApprovalView:
        return await store.get(approval_id)

    return router
