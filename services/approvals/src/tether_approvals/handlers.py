"""The approvals service on the bus: thin handlers (decode → domain → encode).

`create`, `list` (without a token), `consume`, `presence` and `withdraw` are service calls: the bus
itself is authenticated. `decide` is an operator's act and carries the operator's token,
checked exactly as over HTTP.
"""

from __future__ import annotations

from tether_approvals.auth import TokenStore
from tether_approvals.lifecycle import Lifecycle
from tether_approvals.presence import PresenceBoard
from tether_approvals.store import ApprovalStore
from tether_common.bus import Bus
from tether_common.messages.approvals import (
    ApprovalList,
    ApprovalView,
    ConsumeApproval,
    ConsumeResult,
    CreateApproval,
    DecideApproval,
    ListApprovals,
    Presence,
    PresenceQuery,
    WithdrawApproval,
)


async def serve_bus(
    bus: Bus,
    store: ApprovalStore,
    lifecycle: Lifecycle,
    tokens: TokenStore,
    board: PresenceBoard,
) -> None:
    subjects = bus.subjects

    async def create(req: CreateApproval) -> ApprovalView:
        return await lifecycle.create(req)

    async def list_approvals(req: ListApprovals) -> ApprovalList:
        who = None if req.token is None else await tokens.authenticate(req.token)
        return ApprovalList(approvals=await store.find(req, who))

    async def decide(req: DecideApproval) -> ApprovalView:
        who = await tokens.authenticate(req.token)
        return await lifecycle.decide(who, req.approval_id, req.decision, req.note)

    async def consume(req: ConsumeApproval) -> ConsumeResult:
        return await lifecycle.consume(req)

    async def presence(req: PresenceQuery) -> Presence:
        return Presence(approvers=await board.approvers(req.agent, req.owner))

    async def withdraw(req: WithdrawApproval) -> ApprovalView:
        return await lifecycle.withdraw(req)

    await bus.serve(subjects.approval_create, create)
    await bus.serve(subjects.approval_list, list_approvals)
    await bus.serve(subjects.approval_decide, decide)
    await bus.serve(subjects.approval_consume, consume)
    await bus.serve(subjects.approval_presence, presence)
    await bus.serve(subjects.approval_withdraw, withdraw)
