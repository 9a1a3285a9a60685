"""The approval lifecycle: pending → granted / denied / expired → consumed; pending →
withdrawn when the run waiting on it is stopped.

Each transition is one PostgreSQL transaction holding the row lock: the row, an operator
event and an audit record change together. The decision is then put on JetStream
(message id `<approval_id>:decided`, so a re-send is deduplicated); the row keeps an
outbox mark, and the sweeper re-sends whatever a crash left unsent.

Every decision (an operator's, an automated approver's, expiry's) is signed with the
decision key (`tether_common.decisions`) in the transaction that makes it; the proof is
kept on the row and carried on the message, and the brain resumes nothing without it. A
decided row whose proof does not verify was written by someone else: it is never
announced or spent, and the attempt goes to the run's trail.

Deletes are never remembered: `allow_run` / `allow_chat` on a request whose scope or
effect is `delete` is refused (422 `delete_not_remembered`) rather than silently
downgraded, so the operator sees what was actually granted.

Two keys (tether_approvals.decisions.quorum): a request that needs a quorum collects
votes on its row, each under the row lock (so two people deciding at once, on any
replicas, are counted once each), and is decided only when the quorum is met or anyone
denies; until then nothing is signed or announced. Escalation moves an unanswered request to its
second group, by the sweeper or by the first decision that finds it due.

People are told (tether_approvals.notices.outbox): a request left for a person, and
every later decision, expiry or withdrawal of one, writes its notices in the same
transaction.

`Lifecycle` is the one entry point; its parts: `transitions` (the writes of every change,
and the signing), `announcing` (JetStream and the outbox mark), `deciding` (an
operator's decision or vote), `spending` (consume) and `sweeping` (escalation, expiry,
re-sends).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.decisions.announcing import Announcer, Publisher
from tether_approvals.decisions.decided import audit_data
from tether_approvals.decisions.deciding import Deciding
from tether_approvals.decisions.quorum import columns, required
from tether_approvals.decisions.rules import AutomatedApprover, first_answer
from tether_approvals.decisions.spending import UNVERIFIED, Spending
from tether_approvals.decisions.sweeping import Sweeper
from tether_approvals.decisions.transitions import Transitions
from tether_approvals.notices.outbox import Notices
from tether_approvals.persistence.store import add_event, locked_row, view
from tether_approvals.persistence.tables import approvals
from tether_approvals.settings import QuorumRuleSetting
from tether_common import audit
from tether_common.decisions import DecisionKey
from tether_common.errors import NotFoundError
from tether_common.messages.approvals import (
    Answer,
    ApprovalView,
    ConsumeApproval,
    ConsumeResult,
    CreateApproval,
    Decision,
    WithdrawApproval,
)

__all__ = ["UNVERIFIED", "Lifecycle", "Publisher"]


class Lifecycle:
    """The lifecycle's one entry point: makes and withdraws requests itself, and hands
    deciding, spending and sweeping to their parts, which share its transitions and its
    announcer."""

    def __init__(
        self,
        engine: AsyncEngine,
        publish: Publisher,
        *,
        default_expiry_s: float,
        approvers: Sequence[AutomatedApprover] = (),
        sink: audit.JsonlSink | None = None,
        key: DecisionKey | None = None,
        notices: Notices | None = None,
        quorum_rules: Sequence[QuorumRuleSetting] = (),
    ) -> None:
        self.engine = engine
        self.quorum_rules = tuple(quorum_rules)
        self.default_expiry_s = default_expiry_s
        self.approvers = tuple(approvers)
        self.notices = notices
        # Without a configured key (tests building a lifecycle alone) a random one: the
        # decisions are still signed, by a key no one else holds.
        self.transitions = Transitions(
            key=key or DecisionKey.generate(), sink=sink, notices=notices
        )
        self.announcer = Announcer(engine, publish, self.transitions)
        self.deciding = Deciding(engine, self.transitions, self.announcer)
        self.spending = Spending(engine, self.transitions, self.announcer)
        self.sweeper = Sweeper(engine, self.transitions, self.announcer)

    def verified(self, item: Any) -> bool:
        """Does this decided row carry this service's proof of its decision?"""
        return self.transitions.verified(item)

    async def announce(self, item: ApprovalView) -> None:
        await self.announcer.announce(item)

    async def create(self, req: CreateApproval) -> ApprovalView:
        now = datetime.now(UTC)
        expiry = req.expires_in_s or self.default_expiry_s
        rule, source = required(req, self.quorum_rules) or (None, None)
        values = req.model_dump(exclude={"version", "expires_in_s", "quorum"})
        values |= {"approval_id": f"apr_{uuid.uuid4().hex}", "status": "pending"}
        values |= {"created_at": now, "expires_at": now + timedelta(seconds=expiry)}
        values |= columns(rule, now)
        answer, identity = await first_answer(self.approvers, req) or ("no_opinion", "")
        if rule is not None and answer != "deny":
            answer = "no_opinion"  # a quorum is people: an automated allow never stands in
        async with self.engine.begin() as conn:
            row = (await conn.execute(approvals.insert().values(values).returning(approvals))).one()
            item = view(row)
            await add_event(conn, "created", item, now)
            if source is not None:
                data = audit_data(item) | {"source": source}
                await self.transitions.trail(conn, item, "approval.quorum", data)
            if answer != "no_opinion":
                item = await self.transitions.settle(conn, item, answer, identity, None, auto=True)
            elif self.notices is not None:
                await self.notices.record(conn, "created", item)
        if item.decision is not None:
            await self.announcer.announce(item)
        return item

    async def decide(
        self,
        who: Principal,
        approval_id: str,
        decision: Decision | Answer,
        note: str | None,
        *,
        arguments: dict[str, Any] | None = None,
        text: str | None = None,
    ) -> ApprovalView:
        """See `Deciding.decide`."""
        return await self.deciding.decide(
            who, approval_id, decision, note, arguments=arguments, text=text
        )

    async def consume(self, req: ConsumeApproval) -> ConsumeResult:
        """Spend a granted approval once, for exactly the action it was sealed to."""
        return await self.spending.consume(req)

    async def withdraw(self, req: WithdrawApproval) -> ApprovalView:
        """The run waiting on this request was stopped: a pending request becomes
        `withdrawn` (its card taken back, people told); any other is left as it is. The
        run id must match, so a caller cannot withdraw another run's request by id."""
        async with self.engine.begin() as conn:
            row = await locked_row(conn, req.approval_id, None)
            if row.run_id != req.run_id:
                raise NotFoundError(f"no approval '{req.approval_id}' of run '{req.run_id}'")
            if row.status != "pending":
                return view(row)
            return await self.transitions.withdraw(conn, row, req.reason)

    async def sweep(self, republish_after_s: float) -> int:
        """Expire what is due (one replica at a time) and re-send unsent decisions."""
        return await self.sweeper.sweep(republish_after_s)
