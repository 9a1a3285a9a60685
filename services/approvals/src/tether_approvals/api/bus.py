"""The approvals service on the bus: thin handlers (decode → domain → encode).

`create`, `list` (without a token), `consume`, `presence` and `withdraw` are service calls: the bus
itself is authenticated. `decide` and `watch` are an operator's acts and carry the
operator's token, checked exactly as over HTTP (`watch` is the operator event stream of
`api.approvals`, polled by the brain's console, with the operator's presence kept the same way).
"""

from __future__ import annotations

from tether_approvals.auth import TokenStore
from tether_approvals.decisions.lifecycle import Lifecycle
from tether_approvals.persistence.presence import PresenceBoard
from tether_approvals.persistence.store import ApprovalStore
from tether_common.bus import Bus
from tether_common.messages.approvals import (
    ApprovalEvent,
    ApprovalList,
    ApprovalView,
    ApprovalWatch,
    ConsumeApproval,
    ConsumeResult,
    CreateApproval,
    DecideApproval,
    ListApprovals,
    Presence,
    PresenceQuery,
    WatchApprovals,
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
        return await lifecycle.decide(
            who, req.approval_id, req.decision, req.note, arguments=req.arguments, text=req.text
        )

    async def consume(req: ConsumeApproval) -> ConsumeResult:
        return await lifecycle.consume(req)

    async def presence(req: PresenceQuery) -> Presence:
        return Presence(approvers=await board.approvers(req.agent, req.owner))

    async def withdraw(req: WithdrawApproval) -> ApprovalView:
        return await lifecycle.withdraw(req)

    async def watch(req: WatchApprovals) -> ApprovalWatch:
        return await watch_approvals(req, store, tokens, board)

    await bus.serve(subjects.approval_create, create)
    await bus.serve(subjects.approval_list, list_approvals)
    await bus.serve(subjects.approval_decide, decide)
    await bus.serve(subjects.approval_consume, consume)
    await bus.serve(subjects.approval_presence, presence)
    await bus.serve(subjects.approval_withdraw, withdraw)
    await bus.serve(subjects.approval_watch, watch)


async def watch_approvals(
    req: WatchApprovals, store: ApprovalStore, tokens: TokenStore, board: PresenceBoard
) -> ApprovalWatch:
    """One poll of an operator's live view. The token is checked on every poll, so a
    revoked one stops seeing events at once (the HTTP stream checks it when it opens)."""
    who = await tokens.authenticate(req.token)
    who.require("approvals.read")
    if req.leave:
        if req.session_id is not None:
            await board.leave(req.session_id, who)
        return ApprovalWatch(
            session_id=None,
            events=[],
            last_event_id=req.after or 0,
            heartbeat_s=board.heartbeat_s,
        )
    session_id = await board.keep(who, req.session_id, beat=req.beat)
    events: list[ApprovalEvent] = []
    if req.after is None:
        last = await store.last_event_id()
    else:
        events, last = await store.events_after(req.after, who)
    return ApprovalWatch(
        session_id=session_id, events=events, last_event_id=last, heartbeat_s=board.heartbeat_s
    )
