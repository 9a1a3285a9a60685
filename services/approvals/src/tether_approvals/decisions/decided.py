"""What a decision says: the message the brain resumes from, the facts its proof covers,
who made it, and what the audit trail keeps of a request (never argument values)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tether_approvals.decisions.quorum import is_quorum
from tether_common import audit
from tether_common.decisions import DecisionFacts, edit_digest, payload_of, response_digest
from tether_common.messages.approvals import ApprovalDecided, ApprovalView
from tether_common.metrics import approval_decision_duration

__all__ = [
    "approvers_of",
    "audit_data",
    "decided_message",
    "facts_of",
    "is_delete",
    "observe_decision",
]


def decided_message(item: ApprovalView) -> ApprovalDecided:
    assert item.decision is not None, "only a decided request is announced"
    return ApprovalDecided(
        approval_id=item.approval_id,
        run_id=item.run_id,
        step=item.step,
        decision=item.decision,
        action_digest=item.action_digest,
        decided_by=item.decided_by or "unknown",
        note=item.note,
        ts=item.decided_at or datetime.now(UTC),
        approvers=approvers_of(item),
        proof=item.proof,
        arguments=item.edited_args,
        response=item.response,
    )


def approvers_of(item: ApprovalView) -> list[str]:
    """Everyone whose decision made this one: a quorum's people (a deny included), else
    the one decider (expiry too, whatever partial votes it ended)."""
    if item.approvals and item.decision != "expired":
        return [v.by for v in item.approvals]
    return [item.decided_by] if item.decided_by else []


def facts_of(item: Any) -> DecisionFacts | None:
    """What a decided row's proof covers (a row or a view); None when it has no decision."""
    if item.decision is None or item.decided_at is None:
        return None
    payload = payload_of(item.decision, item.tool, item.edited_args, item.response)
    return DecisionFacts(
        item.approval_id, item.run_id, item.action_digest, item.decision, item.decided_at, payload
    )


def observe_decision(item: ApprovalView) -> None:
    """Record how long a request waited for its decision (an operator's or expiry's).
    Answers an automated approver gives at creation are no wait and are left out, so the
    histogram shows how long runs wait for people."""
    if item.decision is None or item.decided_at is None:
        return
    waited = max(0.0, (item.decided_at - item.created_at).total_seconds())
    approval_decision_duration.record(waited, {"decision": item.decision})


def is_delete(row: Any) -> bool:
    return "delete" in (row.scope, row.effect)


def audit_data(item: ApprovalView) -> dict[str, Any]:
    """What the trail keeps: who decided what about which action, never argument values."""
    data = {
        "approval_id": item.approval_id,
        "step": item.step,
        "tool": item.tool,
        "args": audit.redact(item.args),
        "action_digest": item.action_digest,
        "status": item.status,
        "decision": item.decision,
        "decided_by": item.decided_by,
        "note": item.note,
    }
    if item.changes is not None:  # a staged effect: the change set approved, by digest
        data["changes"] = item.changes.digest
    if item.edited_args is not None:  # the original stay in `args`; both as values' shapes
        data["edited_args"] = audit.redact(item.edited_args)
        data["edit"] = edit_digest(item.tool, item.edited_args)
    if item.response is not None:  # the text itself is not kept in the trail
        data["response"] = response_digest(item.response)
    if is_quorum(item):
        votes = [{"by": v.by, "decision": v.decision, "group": v.group} for v in item.approvals]
        data |= {"needed": item.needed, "group": item.group, "approvals": votes}
    return data
