"""Composition root of the approvals service."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from tether_approvals.api import approvals_router
from tether_approvals.settings import ApprovalSettings
from tether_approvals.store import ApprovalStore
from tether_common.http import operator_token_hashes
from tether_common.messages.approvals import (
    ApprovalList,
    ApprovalView,
    CreateApproval,
    ListApprovals,
)
from tether_common.service import Service
from tether_common.settings import CommonSettings

SERVICE = "approvals"


def create_app(common: CommonSettings, settings: ApprovalSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    store = ApprovalStore(service.engine)
    tokens = operator_token_hashes(common.operator_token)

    async def create(req: CreateApproval) -> ApprovalView:
        return await store.create(req)

    async def list_pending(req: ListApprovals) -> ApprovalList:
        return ApprovalList(approvals=await store.list(req.status, req.limit))

    async def on_start() -> None:
        await service.bus.serve(service.subjects.approval_create, create)
        await service.bus.serve(service.subjects.approval_list, list_pending)

    return service.app(
        title="Tether approvals", on_start=on_start, routers=[approvals_router(store, tokens)]
    )
