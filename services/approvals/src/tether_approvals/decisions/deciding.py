"""An operator's decision on a pending request, under its row lock: refused when it is no
longer pending or would remember a delete; on a request that needs a quorum, a vote,
counted once per person, that decides the request only when the quorum is met or
anyone denies (tether_approvals.decisions.quorum)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.decisions.announcing import Announcer
from tether_approvals.decisions.answers import check_answer
from tether_approvals.decisions.decided import audit_data, is_delete, observe_decision
from tether_approvals.decisions.quorum import (
    decided_by,
    decision_of,
    is_quorum,
    met,
    refusal,
    voter,
)
from tether_approvals.decisions.transitions import Transitions
from tether_approvals.persistence.store import in_scope, locked_row, view
from tether_common.errors import ConflictError, ErrorCode, MessageError, TetherError
from tether_common.messages.approvals import Answer, ApprovalView, Decision, Vote
from tether_common.metrics import bus_errors

__all__ = ["Deciding"]

log = logging.getLogger(__name__)


class Deciding:
    def __init__(self, engine: AsyncEngine, transitions: Transitions, announcer: Announcer) -> None:
        self.engine = engine
        self.transitions = transitions
        self.announcer = announcer

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
        """An operator's decision; 409 `already_decided` / `expired`, 404 out of scope; on
        a request that needs a quorum, a vote (403 `requester_cannot_approve` /
        `not_in_group`, 409 `already_voted` when it does not count). An `edit` (its
        `arguments`) or a `respond` (its `text`): 422 `answer_refused` on a quorum's
        request, `arguments_invalid` for arguments the tool's schema refuses."""
        who.require("approvals.decide")
        async with self.engine.begin() as conn:
            if decision == "edit" or decision == "respond":  # `==` narrows the type; `in` does not
                outcome = await self._answer_locked(
                    conn, who, approval_id, decision, note, arguments, text
                )
            else:
                outcome = await self._decide_locked(conn, who, approval_id, decision, note)
        if isinstance(outcome, TetherError):
            raise outcome  # raised after the commit: the refusal stays in the trail
        if outcome.decision is None:
            return outcome  # a vote towards a quorum: nothing decided, nothing announced
        observe_decision(outcome)
        await self.announcer.announce(outcome)
        if outcome.status == "expired":
            raise ConflictError(f"approval '{approval_id}' has expired", code=ErrorCode.EXPIRED)
        return outcome

    async def _answer_locked(
        self,
        conn: AsyncConnection,
        who: Principal,
        approval_id: str,
        decision: Answer,
        note: str | None,
        arguments: dict[str, Any] | None,
        text: str | None,
    ) -> ApprovalView | TetherError:
        """An edit or a response, decided by one person under the row lock, signed over
        the new arguments or the text."""
        row = await locked_row(conn, approval_id, who)
        if (problem := await self._undecidable(conn, row, approval_id)) is not None:
            return problem
        check_answer(view(row), decision, row.arguments_schema, arguments)
        return await self.transitions.settle(
            conn, row, decision, who.label, note, edited_args=arguments, response=text
        )

    async def _undecidable(
        self, conn: AsyncConnection, row: Any, approval_id: str
    ) -> ApprovalView | None:
        """The request expired now (its expiry written), or raise if it is no longer
        pending; None when it may be decided."""
        if row.status == "pending" and row.expires_at <= datetime.now(UTC):
            return await self.transitions.expire(conn, row)
        if row.status != "pending":
            code = row.status if row.status in ("expired", "withdrawn") else "already_decided"
            raise ConflictError(f"approval '{approval_id}' is {row.status}", code=code)
        return None

    async def _decide_locked(
        self,
        conn: AsyncConnection,
        who: Principal,
        approval_id: str,
        decision: Decision,
        note: str | None,
    ) -> ApprovalView | TetherError:
        plain = await self.transitions.decide_plain(
            conn,
            approval_id,
            decision,
            who.label,
            note,
            # Out of reach: refused just below by `locked_row` as any request is (the
            # row's change then rolled back with the transaction).
            admit=lambda row: in_scope(who, row.tenant, row.agent, row.owner, "approvals.decide"),
        )
        if plain is not None:
            return plain
        row = await locked_row(conn, approval_id, who)
        if (expired := await self._undecidable(conn, row, approval_id)) is not None:
            return expired
        if decision in ("allow_run", "allow_chat") and is_delete(row):
            raise MessageError(
                "deletes are never remembered: allow it once or deny it",
                code=ErrorCode.DELETE_NOT_REMEMBERED,
            )
        pending = await self.transitions.escalate_if_due(conn, view(row))
        if is_quorum(pending):
            return await self._vote(conn, who, pending, decision, note)
        return await self.transitions.settle(conn, row, decision, who.label, note)

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
            await self.transitions.trail(conn, item, "approval.vote_refused", data)
            return problem
        vote = Vote(by=by, decision=decision, at=datetime.now(UTC), group=item.group, note=note)
        votes = [*item.approvals, vote]
        stored = [v.model_dump(mode="json", exclude={"version"}) for v in votes]
        if decision == "deny" or met(item.model_copy(update={"approvals": votes})):
            final = decision_of(votes)
            return await self.transitions.settle(
                conn, item, final, decided_by(votes), note, votes=stored
            )
        return await self.transitions.transition(
            conn, item.approval_id, "voted", "approval.voted", votes=stored
        )
