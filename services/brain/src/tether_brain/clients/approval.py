"""Parking a call for an operator's decision: the sealed action digest, the request to the
approvals service, and what a decision means when the run resumes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from tether_brain.gates import Verdict
from tether_brain.state.run import RunState
from tether_common.bus import Bus
from tether_common.decisions import DecisionFacts, DecisionKey, payload_of
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.approvals import (
    ApprovalDecided,
    ApprovalView,
    ConsumeApproval,
    CreateApproval,
    ListApprovals,
    PresenceQuery,
    WithdrawApproval,
)
from tether_common.messages.gateway import CallRecord
from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import ToolDescriptor

IN_DOUBT = "in_doubt"


def in_doubt(tool: ToolDescriptor, now: Verdict | None = None) -> Verdict:
    """The reconcile card for a non-idempotent call whose outcome a crash left unknown.
    With `now`, the gates' verdict on the call as it stands: what they ask is on the card
    too, so running it again answers exactly that and no more."""
    reason = (
        "the brain stopped while this call ran, so its outcome is unknown. Approve to run it "
        "again; deny to leave it as it is (it will not be re-run)."
    )
    asks: tuple[str, ...] = ()
    if now is not None and now.decision == "ask":
        reason += f" Running it again also answers what the gates ask now: {now.reason}"
        asks = now.asks
    return Verdict("ask", IN_DOUBT, reason, tool.reach, asks=(IN_DOUBT, *asks))


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def history_digest(state: RunState, call: CallRecord) -> str:
    """The run's history up to (and with) the assistant message that made `call`."""
    digest = hashlib.sha256()
    for message in state.messages:
        digest.update(_canonical(message.model_dump(mode="json")))
        if any(c.id == call.id for c in message.tool_calls):
            break
    return digest.hexdigest()


def action_digest(
    state: RunState, call: CallRecord, tool: ToolDescriptor, step: int, staged: str | None = None
) -> str:
    """What an approval is bound to: run, step, tool, arguments, effect, scope, history,
    and for a staged effect the digest of the change set it applies."""
    action: dict[str, Any] = {
        "run_id": state.run_id,
        "step": step,
        "tool": tool.name,
        "arguments": call.arguments,
        "effect": tool.effect,
        "scope": tool.scope,
        "history": history_digest(state, call),
    }
    if staged is not None:
        action["changes"] = staged
    return hashlib.sha256(_canonical(action)).hexdigest()


def decision_problem(key: DecisionKey, state: RunState, decided: ApprovalDecided) -> str | None:
    """Why a decision may not resume `state` (None: it may). It must carry the approvals
    service's proof over exactly what it says, and be about the approval the run waits
    on, for the action sealed when it parked: a row written into the approvals table by
    hand, a message published on the decisions subject by anyone else, or a genuine
    decision about another approval all fail here. An edit's arguments and a response's
    text are covered too, an edit for the parked call's own tool only (its name as the
    run kept it, whatever a message says)."""
    pending = state.counters.pending_approval or {}
    tool = str(pending.get("tool") or "")
    payload = payload_of(decided.decision, tool, decided.arguments, decided.response)
    facts = DecisionFacts(
        decided.approval_id,
        decided.run_id,
        decided.action_digest,
        decided.decision,
        decided.ts,
        payload,
    )
    if decided.run_id != state.run_id or not key.verify(facts, decided.proof):
        return "decision_unverified"
    if (pending.get("approval_id"), pending.get("digest")) != (
        decided.approval_id,
        decided.action_digest,
    ):
        return "decision_mismatch"
    return None


def decided_from_view(view: ApprovalView) -> ApprovalDecided | None:
    """The decision an approval's stored state holds, as if announced (None: undecided)."""
    if view.decision is None or view.decided_at is None:
        return None
    return ApprovalDecided(
        approval_id=view.approval_id,
        run_id=view.run_id,
        step=view.step,
        decision=view.decision,
        action_digest=view.action_digest,
        decided_by=view.decided_by or "unknown",
        note=view.note,
        ts=view.decided_at,
        proof=view.proof,
        arguments=view.edited_args,
        response=view.response,
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """An operator's (or automated approver's) decision, as the brain resumes with it."""

    approval_id: str
    decision: str  # allow_once | allow_run | allow_chat | deny | expired | edit | respond
    note: str | None = None
    decided_by: str | None = None
    arguments: dict[str, Any] | None = None  # `edit`: the call's new arguments
    response: str | None = None  # `respond`: the operator's text, the call's result

    @classmethod
    def of(cls, decided: ApprovalDecided) -> Decision:
        return cls(
            decided.approval_id,
            decided.decision,
            decided.note,
            decided.decided_by,
            decided.arguments,
            decided.response,
        )


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """The approval a parked call waits on, and once allowed, what it answers: the gates
    that asked (`asks`) for the action sealed in `digest` (`action_digest` at `step`, with
    the change set `staged`), for call `call_id` only."""

    approval_id: str
    call_id: str
    digest: str
    step: int
    reconcile: bool = False  # a call in doubt after a crash: re-run it, or leave it as done
    staged: str | None = None  # the change set approving applies (a staged effect)
    # The codes of the gates that asked (None: parked before they were kept; such an
    # approval answers any ask of its call, as it did then).
    asks: tuple[str, ...] | None = None
    # The tool's name on the card: what an edit's proof is checked for (None: parked
    # before it was kept; such a request cannot be edited).
    tool: str | None = None
    # The call's arguments as an operator edited them (None: as the model asked, which
    # the run's history holds); set on a card that an edit parked again.
    arguments: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "call_id": self.call_id,
            "digest": self.digest,
            "step": self.step,
            "reconcile": self.reconcile,
            "staged": self.staged,
            "asks": None if self.asks is None else list(self.asks),
            "tool": self.tool,
            "arguments": self.arguments,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingApproval:
        asks = data.get("asks")
        return cls(
            str(data["approval_id"]),
            str(data["call_id"]),
            str(data["digest"]),
            int(data["step"]),
            bool(data.get("reconcile", False)),
            data.get("staged"),
            None if asks is None else tuple(str(code) for code in asks),
            None if data.get("tool") is None else str(data["tool"]),
            data.get("arguments"),
        )

    def unanswered(self, call: CallRecord, verdict: Verdict, digest: str) -> str | None:
        """Why this approval does not answer `verdict` (an ask) for `call`, whose action's
        digest is now `digest`; None when it does. It answers one call, one sealed action
        and the gates that asked when it was requested: another call, changed arguments or
        history, or a gate that asks only now (a new guardrail or quorum) is not answered."""
        if call.id != self.call_id or digest != self.digest:
            return "the action or the run changed since it was approved."
        new = [code for code in verdict.asks if self.asks is not None and code not in self.asks]
        if new:
            return (
                f"the gates now ask for what this approval did not answer ({', '.join(new)}); "
                "the call must be asked for again."
            )
        return None


@dataclass(frozen=True, slots=True)
class Card:
    """The request for an operator's decision on one call (`body`), and what the run
    keeps of it once the approvals service has given it an id (`pending`)."""

    body: CreateApproval
    call_id: str
    digest: str
    step: int
    reconcile: bool
    staged: str | None
    asks: tuple[str, ...]

    @classmethod
    def of(
        cls,
        state: RunState,
        call: CallRecord,
        tool: ToolDescriptor,
        verdict: Verdict,
        owner: str | None,
        staging: StagedEffect | None,
        *,
        expiry_s: float,
    ) -> Card:
        """The card for `call` as the run stands; `MessageError` if it cannot be shown."""
        changes = staging.changes if staging is not None and staging.stageable else None
        staged = changes.digest if changes is not None else None
        digest = action_digest(state, call, tool, state.step, staged)
        try:
            body = _create_body(state, call, tool, verdict, owner, digest, expiry_s)
            if changes is not None:  # validated whole: the card must be storable
                body = CreateApproval.model_validate(body.model_dump() | {"changes": changes})
            elif staging is not None:  # the operator learns why no diff is shown
                body.reason = f"{body.reason} (not staged: {staging.reason})"
        except ValidationError as exc:  # e.g. arguments no database can store (NUL)
            raise MessageError(
                f"the action cannot be shown to an operator: {exc.errors()[0]['msg']}",
                code=ErrorCode.INVALID_MESSAGE,
            ) from None
        asks = verdict.asks or ((verdict.code,) if verdict.code else ())
        reconcile = verdict.code == IN_DOUBT
        return cls(body, call.id, digest, state.step, reconcile, staged, asks)

    def pending(self, approval_id: str) -> PendingApproval:
        return PendingApproval(
            approval_id,
            self.call_id,
            self.digest,
            self.step,
            self.reconcile,
            self.staged,
            self.asks,
            self.body.tool,
        )


def _create_body(
    state: RunState,
    call: CallRecord,
    tool: ToolDescriptor,
    verdict: Verdict,
    owner: str | None,
    digest: str,
    expiry_s: float,
) -> CreateApproval:
    return CreateApproval(
        run_id=state.run_id,
        step=state.step,
        tool=tool.name,
        args=call.arguments,
        danger=verdict.danger,
        reason=f"{verdict.code}: {verdict.reason}",
        reach=verdict.reach,
        action_digest=digest,
        expires_in_s=expiry_s,
        agent=state.options.agent,
        owner=owner,
        scope=tool.scope,
        effect=tool.effect,
        tenant=state.tenant,
        # Two keys: who started the run never counts towards the quorum.
        requested_by=state.owner,
        quorum=verdict.quorum,
        # An operator's edit is checked against it as it is made.
        arguments_schema=tool.parameters,
    )


class ApprovalPort(Protocol):
    """Asking an operator: the loop's seam onto the approvals service. `ApprovalClient` is
    the real one; `tether_brain.testing.MemoryApprovals` decides in process."""

    async def request(
        self,
        state: RunState,
        call: CallRecord,
        tool: ToolDescriptor,
        verdict: Verdict,
        owner: str | None = None,
        staging: StagedEffect | None = None,
    ) -> tuple[ApprovalView, PendingApproval]: ...

    async def consume(self, approval_id: str, digest: str) -> bool: ...

    async def withdraw(self, run_id: str, approval_id: str) -> None: ...

    async def stored_decision(self, run_id: str, approval_id: str) -> ApprovalDecided | None: ...

    async def operator_present(self, agent: str | None, owner: str | None) -> bool: ...


class ApprovalClient:
    def __init__(self, bus: Bus, *, expiry_s: float) -> None:
        self.bus = bus
        self.expiry_s = expiry_s

    async def request(
        self,
        state: RunState,
        call: CallRecord,
        tool: ToolDescriptor,
        verdict: Verdict,
        owner: str | None = None,
        staging: StagedEffect | None = None,
    ) -> tuple[ApprovalView, PendingApproval]:
        card = Card.of(state, call, tool, verdict, owner, staging, expiry_s=self.expiry_s)
        view = await self.bus.request(self.bus.subjects.approval_create, card.body, timeout=10.0)
        return view, card.pending(view.approval_id)

    async def consume(self, approval_id: str, digest: str) -> bool:
        """Spend a granted approval just before its action runs: True only the first time,
        and only for the same sealed action."""
        body = ConsumeApproval(approval_id=approval_id, action_digest=digest)
        result = await self.bus.request(self.bus.subjects.approval_consume, body, timeout=10.0)
        return result.outcome == "consumed"

    async def withdraw(self, run_id: str, approval_id: str) -> None:
        """The run was stopped while it waited: the approvals service takes the card back
        (`withdrawn`) and tells whoever it told of the request."""
        body = WithdrawApproval(approval_id=approval_id, run_id=run_id)
        await self.bus.request(self.bus.subjects.approval_withdraw, body, timeout=5.0)

    async def stored_decision(self, run_id: str, approval_id: str) -> ApprovalDecided | None:
        """What the approvals service holds about `approval_id` right now (None: pending
        or unknown); the caller verifies it like any announced decision."""
        found = await self.bus.request(
            self.bus.subjects.approval_list,
            ListApprovals(status=None, run_id=run_id, limit=1000),
            timeout=10.0,
        )
        view = next((a for a in found.approvals if a.approval_id == approval_id), None)
        return None if view is None else decided_from_view(view)

    async def operator_present(self, agent: str | None, owner: str | None) -> bool:
        presence = await self.bus.request(
            self.bus.subjects.approval_presence,
            PresenceQuery(agent=agent, owner=owner),
            timeout=5.0,
        )
        return presence.approvers > 0
