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

Two keys (tether_approvals.quorum): a request that needs a quorum collects votes on its
row, each under the row lock (so two people deciding at once, on any replicas, are
counted once each), and is decided only when the quorum is met or anyone denies; until
then nothing is signed or announced. Escalation moves an unanswered request to its
second group, by the sweeper or by the first decision that finds it due.

People are told (tether_approvals.outbox): a request left for a person, and every later
decision, expiry or withdrawal of one, writes its notices in the same transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.decided import (
    audit_data,
    decided_message,
    facts_of,
    is_delete,
    observe_decision,
)
from tether_approvals.outbox import Notices
from tether_approvals.quorum import (
    columns,
    decided_by,
    decision_of,
    is_quorum,
    met,
    refusal,
    required,
    voter,
)
from tether_approvals.rules import AutomatedApprover, first_answer
from tether_approvals.settings import QuorumRuleSetting
from tether_approvals.store import add_event, locked_row, view
from tether_approvals.tables import approvals
from tether_approvals.trail import record, run_trail
from tether_common import audit
from tether_common.decisions import DecisionFacts, DecisionKey
from tether_common.errors import (
    ConflictError,
    ErrorCode,
    MessageError,
    NotFoundError,
    TetherError,
)
from tether_common.messages.approvals import (
    ApprovalDecided,
    ApprovalView,
    ConsumeApproval,
    ConsumeOutcome,
    ConsumeResult,
    CreateApproval,
    Decision,
    EventKind,
    Vote,
    WithdrawApproval,
)
from tether_common.metrics import bus_errors

log = logging.getLogger(__name__)

Publisher = Callable[[ApprovalDecided], Awaitable[None]]

_REFUSED: dict[str, ConsumeOutcome] = {
    "pending": "approval_pending",
    "denied": "approval_denied",
    "expired": "approval_expired",
    "consumed": "already_consumed",
    "withdrawn": "approval_withdrawn",
}
# Outcome of spending a granted row whose proof does not verify (written outside).
UNVERIFIED: ConsumeOutcome = "approval_unverified"


class Lifecycle:
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
        self.publish = publish
        self.default_expiry_s = default_expiry_s
        self.approvers = tuple(approvers)
        self.sink = sink
        # Without a configured key (tests building a lifecycle alone) a random one: the
        # decisions are still signed, by a key no one else holds.
        self.key = key or DecisionKey.generate()
        self.notices = notices

    def verified(self, item: Any) -> bool:
        """Does this decided row carry this service's proof of its decision?"""
        facts = facts_of(item)
        return facts is not None and self.key.verify(facts, item.proof)

    def _decision_values(self, row: Any, decision: str, decided_at: datetime) -> dict[str, Any]:
        facts = DecisionFacts(row.approval_id, row.run_id, row.action_digest, decision, decided_at)
        return {"decision": decision, "decided_at": decided_at, "proof": self.key.sign(facts)}

    async def _transition(
        self,
        conn: AsyncConnection,
        approval_id: str,
        kind: EventKind,
        event: str,
        *,
        notify: bool = True,
        **values: Any,
    ) -> ApprovalView:
        stmt = update(approvals).where(approvals.c.approval_id == approval_id)
        row = (await conn.execute(stmt.values(**values).returning(approvals))).one()
        return await self._recorded(conn, row, kind, event, notify=notify)

    async def _recorded(
        self, conn: AsyncConnection, row: Any, kind: EventKind, event: str, *, notify: bool
    ) -> ApprovalView:
        """What goes with every change of a row, in its transaction: the operator event,
        the audit record and (`notify`) the notices."""
        item = view(row)
        await add_event(conn, kind, item, datetime.now(UTC))
        await record(conn, run_trail(item.run_id), event, audit_data(item), self.sink)
        if notify and self.notices is not None:
            await self.notices.record(conn, kind, item)
        return item

    async def announce(self, item: ApprovalView) -> None:
        """Put a decision on JetStream and set the outbox mark; a failure is left to the
        sweeper, never raised to the operator whose decision is already durable. A
        decision without this service's proof is not announced (see `_refuse_forged`)."""
        if not self.verified(item):
            await self._refuse_forged(item)
            return
        try:
            await self.publish(decided_message(item))
        except Exception:
            log.warning("decision %s not published yet; the sweeper retries", item.approval_id)
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                update(approvals)
                .where(approvals.c.approval_id == item.approval_id)
                .values(published_at=datetime.now(UTC))
            )

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
                await record(conn, run_trail(item.run_id), "approval.quorum", data, self.sink)
            if answer != "no_opinion":
                item = await self._settle(conn, item, answer, identity, None, auto=True)
            elif self.notices is not None:
                await self.notices.record(conn, "created", item)
        if item.decision is not None:
            await self.announce(item)
        return item

    async def _settle(
        self,
        conn: AsyncConnection,
        row: Any,
        decision: Decision,
        by: str,
        note: str | None,
        *,
        auto: bool = False,
        **extra: Any,
    ) -> ApprovalView:
        """Decide a locked pending row (`row`: its columns, or its view)."""
        status = "denied" if decision == "deny" else "granted"
        event = "approval.auto_decided" if auto else "approval.decided"
        return await self._transition(
            conn,
            row.approval_id,
            "decided",
            event,
            # Nobody was asked about an automated answer, so nobody is told of it.
            notify=not auto,
            status=status,
            note=note,
            decided_by=by,
            **self._decision_values(row, decision, datetime.now(UTC)),
            **extra,
        )

    async def _vote(
        self,
        conn: AsyncConnection,
        who: Principal,
        item: ApprovalView,
        decision: Decision,
        note: str | None,
    ) -> ApprovalView | TetherError:
        """One person's decision on a locked request that needs a quorum: recorded (and
        the request decided when it completes the quorum or denies), or the refusal,
        which goes to the trail too and is returned for the caller to raise."""
        by = voter(who, item)
        problem = refusal(who, item, decision)
        if problem is not None:
            log.warning("vote by %s on %s refused: %s", by, item.approval_id, problem.code)
            bus_errors.add(1, {"service": "approvals", "code": problem.code})
            data = audit_data(item) | {"by": by, "asked": decision, "refused": problem.code}
            await record(conn, run_trail(item.run_id), "approval.vote_refused", data, self.sink)
            return problem
        vote = Vote(by=by, decision=decision, at=datetime.now(UTC), group=item.group, note=note)
        votes = [*item.approvals, vote]
        stored = [v.model_dump(mode="json", exclude={"version"}) for v in votes]
        if decision == "deny" or met(item.model_copy(update={"approvals": votes})):
            final = decision_of(votes)
            return await self._settle(conn, item, final, decided_by(votes), note, votes=stored)
        return await self._transition(
            conn, item.approval_id, "voted", "approval.voted", votes=stored
        )

    async def _escalate_if_due(self, conn: AsyncConnection, item: ApprovalView) -> ApprovalView:
        """Move a locked pending request to its second group once its time has come."""
        if item.escalate_at is None or item.escalated_at is not None:
            return item
        now = datetime.now(UTC)
        if item.escalate_at > now:
            return item
        return await self._transition(
            conn,
            item.approval_id,
            "escalated",
            "approval.escalated",
            group=item.escalate_to,
            escalated_at=now,
        )

    async def _expire(self, conn: AsyncConnection, row: Any) -> ApprovalView:
        return await self._transition(
            conn,
            row.approval_id,
            "expired",
            "approval.expired",
            status="expired",
            decided_by="expiry",
            **self._decision_values(row, "expired", datetime.now(UTC)),
        )

    async def _refuse_forged(self, item: ApprovalView) -> None:
        """A decided row this service did not sign: someone wrote the table directly.
        Never announced; logged, counted and written to the run's trail once (the outbox
        mark is set so the sweeper does not pick it up again)."""
        log.warning(
            "approval %s of run %s is %s without a valid proof: written outside the "
            "approvals service; not announced",
            item.approval_id,
            item.run_id,
            item.status,
        )
        bus_errors.add(1, {"service": "approvals", "code": "decision_unverified"})
        async with self.engine.begin() as conn:
            await record(
                conn,
                run_trail(item.run_id),
                "approval.forged_refused",
                audit_data(item) | {"refused": "decision_unverified"},
                self.sink,
            )
            await conn.execute(
                update(approvals)
                .where(approvals.c.approval_id == item.approval_id)
                .values(published_at=datetime.now(UTC))
            )

    async def decide(
        self, who: Principal, approval_id: str, decision: Decision, note: str | None
    ) -> ApprovalView:
        """An operator's decision; 409 `already_decided` / `expired`, 404 out of scope; on
        a request that needs a quorum, a vote (403 `requester_cannot_approve` /
        `not_in_group`, 409 `already_voted` when it does not count)."""
        who.require("approvals.decide")
        async with self.engine.begin() as conn:
            outcome = await self._decide_locked(conn, who, approval_id, decision, note)
        if isinstance(outcome, TetherError):
            raise outcome  # raised after the commit: the refusal stays in the trail
        if outcome.decision is None:
            return outcome  # a vote towards a quorum: nothing decided, nothing announced
        observe_decision(outcome)
        await self.announce(outcome)
        if outcome.status == "expired":
            raise ConflictError(f"approval '{approval_id}' has expired", code=ErrorCode.EXPIRED)
        return outcome

    async def _decide_locked(
        self,
        conn: AsyncConnection,
        who: Principal,
        approval_id: str,
        decision: Decision,
        note: str | None,
    ) -> ApprovalView | TetherError:
        row = await locked_row(conn, approval_id, who)
        if row.status == "pending" and row.expires_at <= datetime.now(UTC):
            return await self._expire(conn, row)
        if row.status != "pending":
            code = row.status if row.status in ("expired", "withdrawn") else "already_decided"
            raise ConflictError(f"approval '{approval_id}' is {row.status}", code=code)
        if decision in ("allow_run", "allow_chat") and is_delete(row):
            raise MessageError(
                "deletes are never remembered: allow it once or deny it",
                code=ErrorCode.DELETE_NOT_REMEMBERED,
            )
        pending = await self._escalate_if_due(conn, view(row))
        if is_quorum(pending):
            return await self._vote(conn, who, pending, decision, note)
        return await self._settle(conn, row, decision, who.label, note)

    async def consume(self, req: ConsumeApproval) -> ConsumeResult:
        """Spend a granted approval once, for exactly the action it was sealed to."""
        expired: ApprovalView | None = None
        async with self.engine.begin() as conn:
            spent = await self._spend(conn, req)
            if spent is not None:
                return ConsumeResult(
                    approval_id=req.approval_id, outcome="consumed", approval=spent
                )
            row = await locked_row(conn, req.approval_id, None)
            outcome = self._consume_outcome(row, req.action_digest)
            if outcome == "consumed" and not self.verified(row):
                outcome = UNVERIFIED
                bus_errors.add(1, {"service": "approvals", "code": "decision_unverified"})
                log.warning(
                    "refused to spend approval %s: its proof does not verify", row.approval_id
                )
            if outcome == "consumed":
                item = await self._mark_consumed(conn, req.approval_id)
            elif outcome == "approval_expired" and row.status == "pending":
                item = expired = await self._expire(conn, row)
            else:
                item = view(row)
                data = audit_data(item) | {"refused": outcome}
                await record(
                    conn, run_trail(row.run_id), "approval.consume_refused", data, self.sink
                )
        if expired is not None:
            observe_decision(expired)
            await self.announce(expired)
        return ConsumeResult(approval_id=req.approval_id, outcome=outcome, approval=item)

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
            return await self._transition(
                conn,
                row.approval_id,
                "withdrawn",
                "approval.withdrawn",
                status="withdrawn",
                note=req.reason,
                decided_by="run stopped",
                decided_at=datetime.now(UTC),
            )

    async def _spend(self, conn: AsyncConnection, req: ConsumeApproval) -> ApprovalView | None:
        """The usual spend in one statement instead of a locked read and an update (it is on
        the way from a decision to its tool): a granted row sealed to this very action
        becomes consumed, the update taking the row lock. Its proof is then checked on
        what the update returns; one that does not verify is put back, under the same
        lock, for `consume` to refuse as before. None: not spent here."""
        stmt = (
            update(approvals)
            .where(
                approvals.c.approval_id == req.approval_id,
                approvals.c.status == "granted",
                approvals.c.action_digest == req.action_digest,
            )
            .values(status="consumed", consumed_at=datetime.now(UTC))
            .returning(approvals)
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        if not self.verified(row):
            back = update(approvals).where(approvals.c.approval_id == req.approval_id)
            await conn.execute(back.values(status="granted", consumed_at=None))
            return None
        return await self._recorded(conn, row, "consumed", "approval.consumed", notify=True)

    async def _mark_consumed(self, conn: AsyncConnection, approval_id: str) -> ApprovalView:
        return await self._transition(
            conn,
            approval_id,
            "consumed",
            "approval.consumed",
            status="consumed",
            consumed_at=datetime.now(UTC),
        )

    @staticmethod
    def _consume_outcome(row: Any, digest: str) -> ConsumeOutcome:
        if row.status == "pending" and row.expires_at <= datetime.now(UTC):
            return "approval_expired"
        if row.status != "granted":
            return _REFUSED[row.status]
        return "consumed" if digest == row.action_digest else "approval_stale"

    async def sweep(self, republish_after_s: float) -> int:
        """Expire what is due (one replica at a time) and re-send unsent decisions."""
        async with self.engine.begin() as conn:
            locked = await conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), _SWEEP_KEY)
            if not locked.scalar():
                return 0
            await self._escalate_due(conn)
            expired = await self._expire_due(conn)
            items = expired + await self._unsent(conn, republish_after_s)
        for item in expired:
            observe_decision(item)
        for item in items:
            await self.announce(item)
        return len(items)

    async def _escalate_due(self, conn: AsyncConnection) -> None:
        """Move unanswered requests to their second group (and tell its people)."""
        now = datetime.now(UTC)
        due = await conn.execute(
            approvals.select()
            .where(
                approvals.c.status == "pending",
                approvals.c.escalated_at.is_(None),
                approvals.c.escalate_at <= now,
                approvals.c.expires_at > now,
            )
            .with_for_update(skip_locked=True)
            .limit(200)
        )
        for row in list(due):
            await self._escalate_if_due(conn, view(row))

    async def _expire_due(self, conn: AsyncConnection) -> list[ApprovalView]:
        due = await conn.execute(
            approvals.select()
            .where(approvals.c.status == "pending", approvals.c.expires_at <= datetime.now(UTC))
            .with_for_update(skip_locked=True)
            .limit(200)
        )
        return [await self._expire(conn, row) for row in list(due)]

    async def _unsent(self, conn: AsyncConnection, older_than_s: float) -> list[ApprovalView]:
        """Decisions a crash (or a NATS outage) kept off JetStream; re-sent deduplicated."""
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        rows = await conn.execute(
            approvals.select()
            .where(
                approvals.c.decision.is_not(None),
                approvals.c.published_at.is_(None),
                approvals.c.decided_at <= cutoff,
            )
            .limit(200)
        )
        return [view(row) for row in rows]


# Held for one sweep transaction, so replicas never expire (and announce) the same request.
_SWEEP_KEY = {"k": 0x7E7A_5EE9}
