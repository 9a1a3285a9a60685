"""An operator's answer other than allow or deny, applied to a parked call.

`edit`: the call with the operator's arguments goes through every gate again. A gate that
denies it refuses it; one that asks is answered by the edit only when it asks for no more
than the approval was asked for (the same gates, no quorum): then a stageable call is
staged again (its new change set is what is applied) and run, and the approval is spent.
An edit into something that asks more is parked on a new card with the edited arguments.
So an edit never widens what the operator's approval covers.

`respond`: nothing runs; the model reads the operator's text as the call's result,
marked `OPERATOR_RESPONSE` (never as the tool's output). The text does not taint the run:
it comes from an operator who may decide for it, not from outside.
"""

from __future__ import annotations

import dataclasses
import json

from tether_brain.clients.approval import ApprovalPort, Decision, PendingApproval, action_digest
from tether_brain.clients.staging import stage
from tether_brain.gates import Verdict
from tether_brain.loop.acting import Actor
from tether_brain.loop.planned import Planned, refusal
from tether_brain.loop.subagents import workspace_of
from tether_brain.state.run import RunState
from tether_brain.tools.results import refused
from tether_common import audit
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolResult

__all__ = ["OPERATOR_EDIT", "OPERATOR_RESPONSE", "Answering", "operator_response"]

OPERATOR_RESPONSE = "operator_response"
OPERATOR_EDIT = "OPERATOR_EDIT"
EDIT_SHOWN_CHARS = 1000  # the edited arguments as the model is told of them, cut


def operator_response(call: CallRecord, decision: Decision) -> ToolResult:
    """The result a `respond` gives the model: the operator's text, said to be theirs."""
    by = decision.decided_by or "an operator"
    return ToolResult(
        call_id=call.id,
        name=call.name,
        ok=False,
        content=(
            f"OPERATOR_RESPONSE: {call.name} did not run; the operator ({by}) answered "
            f"in its place:\n{decision.response or ''}"
        ),
        error_code=OPERATOR_RESPONSE,
    )


def _covers(pending: PendingApproval, verdict: Verdict) -> bool:
    """Does the approval answer what the gates ask of the edited call? Only the same
    gates (a card parked before they were kept answers no edit) and never a quorum."""
    if pending.asks is None or verdict.quorum is not None:
        return False
    asks = verdict.asks or ((verdict.code,) if verdict.code else ())
    return set(asks) <= set(pending.asks)


class Answering:
    def __init__(self, actor: Actor, approvals: ApprovalPort) -> None:
        self.actor = actor
        self.approvals = approvals

    def edited_call(self, call: CallRecord, decision: Decision) -> CallRecord:
        return call.model_copy(update={"arguments": dict(decision.arguments or {})})

    def audit_edit(self, state: RunState, original: CallRecord, edited: CallRecord) -> None:
        """The trail holds both calls (their arguments' shapes, never values)."""
        state.audit_later(
            "approval.edited",
            {
                "call_id": original.id,
                "tool": original.name,
                "before": audit.redact(original.arguments),
                "after": audit.redact(edited.arguments),
            },
        )

    async def edit(
        self, state: RunState, call: CallRecord, pending: PendingApproval
    ) -> tuple[ToolResult, bool] | Planned:
        """Run the edited `call` if the gates allow it or the approval answers what they
        ask (True: it ran under the approval); a `Planned` ask when it must be asked for
        again; a refusal otherwise."""
        if pending.reconcile or pending.tool is None:
            return refused(
                call, "approval_denied", "this call cannot be edited; it was not run."
            ), False
        gate = self.actor.toolbox.validate(call, state.options)
        verdict = None if gate.tool is None else self.actor.verdict(state, gate.tool, call)
        if gate.tool is None or verdict is None or not gate.allowed or verdict.decision != "ask":
            planned = (await self.actor.plan(state, [call]))[0]
            return await self._run(state, planned, pending, None)
        if not _covers(pending, verdict):
            return (await self.actor.plan(state, [call]))[0]
        staging = await stage(
            self.actor.toolbox.runner, state.run_id, call, gate.tool, workspace_of(state)
        )
        if staging is not None and staging.error_code is not None:
            return refused(call, staging.error_code, staging.reason), False
        changes = staging.changes if staging is not None and staging.stageable else None
        staged = None if changes is None else changes.digest
        digest = action_digest(state, call, gate.tool, pending.step, staged)
        answer = dataclasses.replace(pending, digest=digest, staged=staged)
        planned = (await self.actor.plan(state, [call], approved=answer))[0]
        return await self._run(state, planned, pending, staged)

    async def _run(
        self, state: RunState, planned: Planned, pending: PendingApproval, staged: str | None
    ) -> tuple[ToolResult, bool] | Planned:
        if planned.decision == "ask":
            return planned  # a hook changed it into something that asks: a new card
        if planned.decision == "refused":
            return refusal(planned), False  # counted by the gate that refused it
        # Spent for the action it was sealed to (the original call): an edit is used once.
        if not await self.approvals.consume(pending.approval_id, pending.digest):
            return refused(planned.call, "approval_stale", "this approval was already used."), False
        if staged is not None:  # the edited call's own change set, exactly
            planned = dataclasses.replace(planned, staged=staged)
        result = (await self.actor.execute(state, [planned]))[0]
        shown = json.dumps(planned.call.arguments, ensure_ascii=False)[:EDIT_SHOWN_CHARS]
        told = f"{OPERATOR_EDIT}: an operator changed this call's arguments to {shown} before it ran.\n"
        return result.model_copy(update={"content": told + result.content}), True
