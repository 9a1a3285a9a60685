"""Parking a call for an operator and resuming with the decision: the run is saved as
`awaiting_approval` and holds nothing; the decision runs every gate again, checks the
sealed digest, and spends the approval once.

A call of a stageable tool is staged first (`clients/staging.py`): its change set goes on
the card and into the sealed digest, and an allow applies exactly that set. A set the
runner finds stale (the workspace changed underneath) applied nothing: the call is
staged again and parked on a new card.

An `edit` or a `respond` (`loop/answering.py`) is applied here too: the edited call is
gated again (and parked on a new card, with its arguments kept on the pending approval,
when it asks for more); a response is the call's result and nothing runs."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from opentelemetry import propagate, trace

from tether_brain.clients.approval import ApprovalPort, Decision, PendingApproval, action_digest
from tether_brain.clients.staging import stage
from tether_brain.loop.acting import Actor
from tether_brain.loop.answering import Answering, operator_response
from tether_brain.loop.outcome import Outcome
from tether_brain.loop.planned import Planned, refusal
from tether_brain.loop.recording import record_result
from tether_brain.loop.subagents import workspace_of
from tether_brain.persistence import trail
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.results import refused
from tether_brain.tools.toolbox import GateOutcome
from tether_common.errors import ErrorCode, TetherError
from tether_common.messages.events import ToolApprovalNeeded, ToolApproved, ToolDenied
from tether_common.messages.gateway import CallRecord
from tether_common.messages.staging import STALE_EFFECT, StagedEffect
from tether_common.messages.tools import ToolResult
from tether_common.metrics import denials

tracer = trace.get_tracer(__name__)
log = logging.getLogger(__name__)


class Parking:
    def __init__(self, actor: Actor, approvals: ApprovalPort) -> None:
        self.actor = actor
        self.approvals = approvals
        self.answering = Answering(actor, approvals)

    async def withdraw(self, state: RunState) -> None:
        """A run stopped while parked takes back the request it waited on. Best effort:
        if the approvals service cannot be reached the request expires as usual, and a
        decision made meanwhile resumes nothing (the run has ended)."""
        approval_id = (state.counters.pending_approval or {}).get("approval_id")
        if approval_id is None:
            return
        try:
            await self.approvals.withdraw(state.run_id, str(approval_id))
        except TetherError as exc:
            log.warning("could not withdraw approval %s: %s", approval_id, exc.message)

    async def park(
        self, state: RunState, item: Planned, *, arguments: dict[str, Any] | None = None
    ) -> Outcome:
        """Ask an operator: the run is saved as awaiting_approval and holds nothing (no
        task, no lease once the caller commits) until a decision resumes it. `GO_ON` if
        no one can be asked (the refusal is recorded instead). `arguments`: an operator's
        edit of the call (its history keeps what the model asked), kept with the pending
        approval so the resumed call is the edited one."""
        assert item.tool is not None
        assert item.verdict is not None
        try:
            if state.options.interactive and not await self.watched(state):
                raise TetherError("no operator is connected to decide", code=ErrorCode.NO_OPERATOR)
            owner = self.actor.agents.of_run(state.options, state.tenant).owner
            staged = await self.staged(state, item)
            if staged is not None and staged.error_code is not None:
                # Staging found the call would fail as it stands: nothing to approve.
                record_result(state, item, refused(item.call, staged.error_code, staged.reason))
                return Outcome.GO_ON
            view, pending = await self.approvals.request(
                state, item.call, item.tool, item.verdict, owner, staged
            )
            if arguments is not None:
                pending = dataclasses.replace(pending, arguments=arguments)
        except TetherError as exc:
            result = refused(
                item.call,
                "approval_unavailable",
                f"an operator's approval is needed ({item.verdict.reason}) but none can be asked: {exc.message}",
            )
            record_result(state, item, result)
            return Outcome.GO_ON
        state.status = "awaiting_approval"
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the wait is a link from the resumed run, not an open span
        state.counters.pending_approval = pending.to_json() | {
            "trace": carrier,
            "parked_at": time.time(),
        }
        state.audit_later(
            "approval.requested",
            trail.approval_requested(
                view.approval_id, item.tool.name, pending.digest, item.verdict, pending.staged
            ),
        )
        emit(
            state,
            ToolApprovalNeeded(
                step=state.step,
                approval_id=view.approval_id,
                call_id=item.call.id,
                name=item.call.name,
                arguments=item.call.arguments,
                code=item.verdict.code,
                reason=item.verdict.reason,
                reach=item.verdict.reach,
                danger=item.verdict.danger,
                expires_at=view.expires_at.isoformat(),
            ),
        )
        return Outcome.PARKED

    async def staged(self, state: RunState, item: Planned) -> StagedEffect | None:
        """The runner's staging of the call: the change set the card shows and an allow
        applies, or why there is none (None: not a staging tool, or a reconcile card,
        which is about a call already sent)."""
        assert item.tool is not None
        if item.verdict is not None and item.verdict.code == "in_doubt":
            return None
        return await stage(
            self.actor.toolbox.runner, state.run_id, item.call, item.tool, workspace_of(state)
        )

    async def watched(self, state: RunState) -> bool:
        """An interactive run asks only when an operator who may decide is connected."""
        config = self.actor.agents.of_run(state.options, state.tenant)
        return await self.approvals.operator_present(state.options.agent, config.owner)

    async def resume(self, state: RunState, decision: Decision) -> Outcome:
        """Apply an operator's decision to the parked call, through every gate again;
        `PARKED` when a staged effect was stale and the call waits on a new card."""
        raw = state.counters.pending_approval
        state.counters.pending_approval = None
        if raw is None:
            return Outcome.GO_ON
        pending = PendingApproval.from_json(raw)
        parked = trace.get_current_span(propagate.extract(raw.get("trace", {}))).get_span_context()
        with tracer.start_as_current_span(
            "approval.wait", links=[trace.Link(parked)] if parked.is_valid else None
        ) as span:
            span.set_attribute("tether.approval.id", pending.approval_id)
            span.set_attribute("tether.approval.decision", decision.decision)
            span.set_attribute(
                "tether.approval.wait_s", time.time() - float(raw.get("parked_at", time.time()))
            )
        call = state.call_by_id(pending.call_id)
        if call is None:
            return Outcome.GO_ON
        if pending.arguments is not None:  # parked after an operator's edit
            call = call.model_copy(update={"arguments": pending.arguments})
        edited = None
        if decision.decision == "edit":
            edited = self.answering.edited_call(call, decision)
            self.answering.audit_edit(state, call, edited)
            call = edited
            answered = await self.answering.edit(state, call, pending)
            if isinstance(answered, Planned):  # it asks for more: a new card
                self._audit_decided(state, pending, decision, "asked_again")
                return await self.park(state, answered, arguments=call.arguments)
            result, approved = answered
        else:
            result, approved = await self.decided(state, call, pending, decision)
        outcome = "consumed" if approved else result.error_code
        if result.error_code == STALE_EFFECT:
            outcome = STALE_EFFECT
        self._audit_decided(state, pending, decision, outcome)
        if result.error_code == STALE_EFFECT:
            kept = call.arguments if edited is not None else pending.arguments
            return await self.restage(state, call, arguments=kept)
        said = ToolApproved if approved else ToolDenied  # the same fields, named by the outcome
        emit(
            state,
            said(
                step=state.step,
                approval_id=pending.approval_id,
                call_id=call.id,
                name=call.name,
                decision=decision.decision,
                by=decision.decided_by,
            ),
        )
        item = Planned(call, GateOutcome(True))
        record_result(state, item, result)
        state.counters.low_effort = False
        return Outcome.GO_ON

    def _audit_decided(
        self, state: RunState, pending: PendingApproval, decision: Decision, outcome: str | None
    ) -> None:
        state.audit_later(
            "approval.decided",
            trail.approval_decided(
                pending.approval_id,
                decision.decision,
                decision.decided_by,
                outcome=outcome,
                changes=pending.staged,
            ),
        )

    async def restage(
        self, state: RunState, call: CallRecord, *, arguments: dict[str, Any] | None = None
    ) -> Outcome:
        """A stale staged effect applied nothing: the call is staged again over the
        workspace as it is now and parked on a new card (if the gates still ask)."""
        planned = (await self.actor.plan(state, [call]))[0]
        if planned.decision != "ask":
            result = refusal(planned) if planned.decision == "refused" else None
            if result is None:
                result = (await self.actor.execute(state, [planned]))[0]
            record_result(state, planned, result)
            return Outcome.GO_ON
        return await self.park(state, planned, arguments=arguments)

    async def decided(
        self, state: RunState, call: CallRecord, pending: PendingApproval, decision: Decision
    ) -> tuple[ToolResult, bool]:
        note = f" Note: {decision.note}" if decision.note else ""
        if decision.decision == "respond":  # nothing runs; the approval is never spent
            return operator_response(call, decision), False
        if pending.reconcile and decision.decision in ("deny", "expired"):
            return not_approved(
                call,
                "in_doubt",
                "the brain stopped while this call ran; an operator chose not to run it again, "
                f"so its effect is unknown. Check before repeating it.{note}",
            )
        if decision.decision in ("deny", "expired"):
            code = "approval_expired" if decision.decision == "expired" else "approval_denied"
            return not_approved(call, code, f"the operator did not approve this call.{note}")
        planned = (await self.actor.plan(state, [call], approved=pending))[0]
        tool = planned.tool
        if tool is None or planned.decision == "refused":
            return refusal(planned), False  # counted by the gate that refused it
        # `planned.call`: the call as the gates judged it (a hook may have rewritten it).
        if action_digest(state, planned.call, tool, pending.step, pending.staged) != pending.digest:
            return not_approved(
                call, "approval_stale", "the action or the run changed since it was approved."
            )
        if not await self.approvals.consume(pending.approval_id, pending.digest):
            return not_approved(call, "approval_stale", "this approval was already used.")
        if decision.decision in ("allow_run", "allow_chat") and tool.scope != "delete":
            state.options = state.options.with_grant(tool.name)
            state.counters.run_grants = sorted({*state.counters.run_grants, tool.name})
        if decision.decision == "allow_chat" and tool.scope != "delete":
            # The chat is the run's thread (a run outside one is its own chat): committed
            # with the step, read back by the thread's next turns (threads/store.py).
            state.counters.chat_grants = sorted({*state.counters.chat_grants, tool.name})
        if pending.reconcile:  # "run it again": the runner may take over the in-doubt key
            planned = dataclasses.replace(planned, retry_in_doubt=True)
        if pending.staged is not None:  # the approved change set, exactly; not a re-run
            planned = dataclasses.replace(planned, staged=pending.staged)
        return (await self.actor.execute(state, [planned]))[0], True


def not_approved(call: CallRecord, code: str, message: str) -> tuple[ToolResult, bool]:
    """A parked call the approval gate refuses (denied, expired, stale), counted as such."""
    denials.add(1, {"gate": "approval", "code": code})
    return refused(call, code, message), False
