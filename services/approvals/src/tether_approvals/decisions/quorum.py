"""Two keys: which quorum a request needs, who may count towards it, and when it is met.

Where the requirement comes from: the request's own `quorum` (the brain sets it from a
grant or guardrail) and every matching rule of `TETHER_APPROVALS_QUORUM_RULES`; the
strictest wins (more people first, then a named group over none; on a tie the request's
own, then the first rule). It is fixed on the row when the request is made, so a later
change of the rules never loosens (or tightens) a request already waiting.

Who counts: a principal who may decide the request at all (role and team scope, checked
by the lifecycle), who is not its requester (the agent's owner or the principal that
started the run, in the request's tenant), and who is in the group that may decide now
(the first group, or after escalation the second; earlier votes stand). A person is
counted once, whichever of their tokens they use and however their name is cased or
spelt in compatibility forms (`person`: NFKC, then case-folded: `Carol`, `carol` and
`ＣＡＲＯＬ` are one person, and none of them is a second to the requester `carol`).
Any deny from such a person ends the request; allows are collected until `needed`
distinct people have given one, and the narrowest allow given is the decision
(`allow_once` < `allow_run` < `allow_chat`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tether_approvals.auth import Principal
from tether_approvals.decisions.rules import matches
from tether_approvals.settings import QuorumRuleSetting
from tether_common.errors import AuthError, ConflictError, ErrorCode, TetherError
from tether_common.messages.approvals import (
    ApprovalView,
    CreateApproval,
    Decision,
    QuorumRule,
    Vote,
)

__all__ = [
    "DECIDED_BY_CHARS",
    "allowers",
    "columns",
    "decided_by",
    "decision_of",
    "is_quorum",
    "met",
    "person",
    "refusal",
    "required",
    "voter",
]

# Narrowest first: a quorum grants no more than the most cautious of its people did.
_BREADTH: dict[Decision, int] = {"allow_once": 0, "allow_run": 1, "allow_chat": 2, "deny": -1}


def required(
    req: CreateApproval, rules: Sequence[QuorumRuleSetting]
) -> tuple[QuorumRule, str] | None:
    """The quorum `req` needs and where it comes from (`request` or `rule:<name>`);
    None when one decision decides."""
    found = [(req.quorum, "request")] if req.quorum is not None else []
    found += [(r.quorum, f"rule:{r.name}") for r in rules if matches(r, req)]
    if not found:
        return None
    # max() keeps the first of equals: the request's own rule, then configuration order.
    return max(found, key=lambda pair: pair[0].strictness())


def columns(rule: QuorumRule | None, created_at: datetime) -> dict[str, Any]:
    """The row's quorum columns for a new request."""
    if rule is None:
        return {"needed": 1, "group": None, "escalate_to": None, "escalate_at": None}
    escalate_at = (
        None
        if rule.escalate_after_s is None
        else created_at + timedelta(seconds=rule.escalate_after_s)
    )
    return {
        "needed": rule.needed,
        "group": rule.group,
        "escalate_to": rule.escalate_to,
        "escalate_at": escalate_at,
    }


def is_quorum(item: ApprovalView) -> bool:
    """Does this request need more than one ordinary decision?"""
    return item.needed > 1 or item.group is not None or item.escalate_to is not None


def person(name: str) -> str:
    """The one identity of a name however it is cased or written (Unicode's NFKC
    case fold: compatibility forms, such as full-width letters, then case, then NFKC
    again, since folding can undo the first normalisation)."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return unicodedata.normalize("NFKC", folded)


def voter(who: Principal, item: ApprovalView) -> str:
    """How a vote names its person: the label in the request's tenant, qualified by the
    tenant for an admin from another one (so two tenants' `alice` are two people)."""
    return who.label if who.tenant == item.tenant else f"{who.label}@{who.tenant}"


def refusal(who: Principal, item: ApprovalView, decision: Decision) -> TetherError | None:
    """Why `who`'s `decision` does not count towards `item`'s quorum (None: it counts)."""
    requesters = {person(r) for r in (item.owner, item.requested_by) if r is not None}
    if who.tenant == item.tenant and person(who.name) in requesters:
        return AuthError(
            "the requester cannot decide their own request: another person must",
            code=ErrorCode.REQUESTER_CANNOT_APPROVE,
        )
    if item.group is not None and item.group not in who.groups:
        return AuthError(
            f"only members of the group '{item.group}' may decide this request now",
            code=ErrorCode.NOT_IN_GROUP,
        )
    me = person(voter(who, item))
    if decision != "deny" and any(person(v.by) == me for v in item.approvals):
        # A deny after one's own allow still ends it: changing one's mind towards safety.
        return ConflictError(
            "you have already approved this request; it needs another person",
            code=ErrorCode.ALREADY_VOTED,
        )
    return None


# `decided_by`'s column width; the whole list is on the row's votes and the message.
DECIDED_BY_CHARS = 200


def allowers(votes: Sequence[Vote]) -> list[str]:
    return [v.by for v in votes if v.decision != "deny"]


def decided_by(votes: Sequence[Vote]) -> str:
    """`decided_by` of a quorum's decision: whoever denied, else everyone who allowed; cut
    to the column's width."""
    denied = [v.by for v in votes if v.decision == "deny"]
    names = ", ".join(denied or allowers(votes))
    return names if len(names) <= DECIDED_BY_CHARS else names[: DECIDED_BY_CHARS - 1] + "…"


def met(item: ApprovalView) -> bool:
    """Have `needed` distinct people allowed? (Votes are distinct by construction; counted
    as people anyway, so votes stored before names were folded count once too.)"""
    return len({person(by) for by in allowers(item.approvals)}) >= item.needed


def decision_of(votes: Sequence[Vote]) -> Decision:
    """The decision a met quorum makes: deny if anyone denied, else the narrowest allow."""
    if any(v.decision == "deny" for v in votes):
        return "deny"
    return min((v.decision for v in votes), key=_BREADTH.__getitem__)
