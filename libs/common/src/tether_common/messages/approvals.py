"""Approval requests between brain, approvals service and operators.

The brain creates a request (`CreateApproval`), learns the outcome from the JetStream
subject `approval_decided` (`ApprovalDecided`, decision `expired` included), and spends a
granted approval exactly once with `ConsumeApproval` before it runs the action. A run
stopped while parked withdraws its request (`WithdrawApproval`).

A request may need a quorum (`QuorumRule`): N distinct people, optionally of a named
group, the requester never one of them; it is decided (and `ApprovalDecided` sent) only
when the quorum is reached or anyone denies. Each partial approval is on the view
(`approvals`, `needed`, `group`); an unanswered request may move to a second group.

People who do not watch the console learn of requests from `ApprovalNotice`s: the body
of every signed webhook and the message on the NATS subject `approval_notices`, one per
request, decision, expiry or withdrawal, each with a card a chat tool can show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest
from tether_common.messages.identity import DEFAULT_TENANT, GroupName
from tether_common.messages.staging import ChangeSet

# `withdrawn`: the run stopped while it waited; nothing may be decided or spent any more.
# An approval nobody decided in this long expires, which counts as denied (DESIGN §4).
DEFAULT_EXPIRY_S = 180.0
ApprovalStatus = Literal["pending", "granted", "denied", "expired", "consumed", "withdrawn"]
Decision = Literal["allow_once", "allow_run", "allow_chat", "deny"]
# An operator's answer that is neither an allow nor a deny: `edit` runs the call with new
# arguments (gated again in the brain), `respond` runs nothing and gives the model the
# operator's text as the call's result. One person's answer: never a quorum's vote.
Answer = Literal["edit", "respond"]
DecidedAs = Literal["allow_once", "allow_run", "allow_chat", "deny", "expired", "edit", "respond"]
# An edit's arguments and a response's text are bounded like a card's arguments.
MAX_RESPONSE_CHARS = 20_000
# `voted`: a partial approval towards a quorum; `escalated`: moved to its second group.
EventKind = Literal["created", "voted", "escalated", "decided", "expired", "consumed", "withdrawn"]
MAX_QUORUM = 10
# A card's change set as text is cut here: a chat tool shows a message of tens of
# kilobytes at most (the set's own diffs may reach `staging.MAX_DIFF_TOTAL`).
CARD_CHANGES_CHARS = 20_000
ConsumeOutcome = Literal[
    "consumed",
    "already_consumed",
    "approval_stale",
    "approval_denied",
    "approval_expired",
    "approval_pending",
    "approval_unverified",  # a granted row without the approvals service's proof
    "approval_withdrawn",
]


class QuorumRule(WireModel):
    """Two keys: `needed` distinct people (never the requester) must allow, each a member
    of `group` when one is named (token groups); any deny ends it. Unanswered for
    `escalate_after_s`, the request moves to the group `escalate_to`."""

    needed: int = Field(default=2, ge=1, le=MAX_QUORUM)
    group: GroupName | None = None
    escalate_after_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    escalate_to: GroupName | None = None

    @model_validator(mode="after")
    def _escalation_is_whole(self) -> Self:
        if (self.escalate_after_s is None) != (self.escalate_to is None):
            raise ValueError("escalate_after_s and escalate_to go together")
        return self

    def strictness(self) -> tuple[int, int]:
        """How strict, to choose among several rules (the approvals service's own and a
        request's; an agent's quorum keys): more people first, then a named group."""
        return self.needed, int(self.group is not None)


class Vote(WireModel):
    """One person's decision on a request that needs a quorum, in the group it counted
    for (None: no group was required)."""

    by: str
    decision: Decision
    at: datetime
    group: str | None = None
    note: str | None = None


class CreateApproval(WireRequest):
    run_id: str
    step: int = Field(ge=0, le=2**31 - 1)
    tool: str
    args: dict[str, Any]
    danger: str = "unknown"
    reason: str
    reach: str = "external"
    action_digest: str
    # None: the service's default expiry (`DEFAULT_EXPIRY_S` unless configured).
    expires_in_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    agent: str | None = None
    owner: str | None = None
    # The tool's declared scope (read/create/update/delete) and effect: deletes are
    # never remembered, so they may only be allowed once.
    scope: str | None = None
    effect: str | None = None
    # The run's tenant: which webhook endpoints hear of the request.
    tenant: str = Field(default=DEFAULT_TENANT, pattern=ID_PATTERN, max_length=200)
    # The principal that started the run (like `owner`, never one of a quorum's people).
    requested_by: str | None = Field(default=None, max_length=200)
    # Two keys, from a grant or guardrail; the approvals service's own quorum rules may
    # require more (the stricter wins). None: one decision decides.
    quorum: QuorumRule | None = None
    # A staged effect (`messages.staging`): what approving will change in the workspace,
    # exactly; its digest is part of `action_digest`. None: approved the old way.
    changes: ChangeSet | None = None
    # The tool's JSON Schema for its arguments: an operator's edit is checked against it
    # when it is made (the brain's gates check the edited call again).
    arguments_schema: dict[str, Any] | None = None


class ApprovalView(WireModel):
    approval_id: str
    run_id: str
    step: int
    tool: str
    args: dict[str, Any]
    danger: str
    reason: str
    reach: str
    action_digest: str
    status: ApprovalStatus
    decision: DecidedAs | None = None
    note: str | None = None
    created_at: datetime
    expires_at: datetime
    agent: str | None = None
    owner: str | None = None
    scope: str | None = None
    effect: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    consumed_at: datetime | None = None
    # The approvals service's signature of the decision (tether_common.decisions).
    proof: str | None = None
    tenant: str = DEFAULT_TENANT
    requested_by: str | None = None
    # Quorum: how many distinct people must allow (1: an ordinary request), the group
    # that may decide now (None: any approver), the decisions so far, and escalation.
    needed: int = 1
    group: str | None = None
    approvals: list[Vote] = Field(default_factory=list)
    escalate_to: str | None = None
    escalate_at: datetime | None = None
    escalated_at: datetime | None = None
    changes: ChangeSet | None = None
    # `edit`: the arguments the operator set (the original stay in `args`); `respond`:
    # the text the model receives instead of the tool's result. Both are covered by the
    # proof (`tether_common.decisions.payload_of`).
    edited_args: dict[str, Any] | None = None
    response: str | None = None


class ListApprovals(WireRequest):
    status: ApprovalStatus | None = "pending"
    limit: int = Field(default=100, ge=1, le=1000)
    run_id: str | None = None
    agent: str | None = None
    owner: str | None = None
    # Only requests whose id starts with this (the CLI resolving `apr_3fa2` to one).
    id_prefix: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    # Without a token this is a service call (the bus itself is authenticated);
    # with one, the token's role and team scope apply.
    token: str | None = None


class ApprovalList(WireModel):
    approvals: list[ApprovalView]


class _Answering(WireRequest):
    """A decision, or an `edit` with its `arguments` or a `respond` with its `text`."""

    decision: Decision | Answer
    note: str | None = Field(default=None, max_length=2000)
    arguments: dict[str, Any] | None = None
    text: str | None = Field(default=None, min_length=1, max_length=MAX_RESPONSE_CHARS)

    @model_validator(mode="after")
    def _payload_fits(self) -> Self:
        if (self.decision == "edit") != (self.arguments is not None):
            raise ValueError("`arguments` go with decision `edit`, and only with it")
        if (self.decision == "respond") != (self.text is not None):
            raise ValueError("`text` goes with decision `respond`, and only with it")
        return self


class DecideApproval(_Answering):
    """An operator's decision over NATS; `token` is the operator's bearer token."""

    approval_id: str
    token: str


class ApprovalDecided(WireModel):
    """On JetStream `approval_decided`: what the brain resumes a parked run from."""

    approval_id: str
    run_id: str
    step: int
    decision: DecidedAs
    action_digest: str
    decided_by: str
    note: str | None = None
    ts: datetime
    # Everyone whose decision made it (a quorum's people; otherwise `decided_by` alone).
    approvers: list[str] = Field(default_factory=list)
    # HMAC of (approval, run, digest, decision, ts, and an edit's or response's digest)
    # by the approvals service: a decision without a proof that verifies does not resume
    # a run (tether_common.decisions).
    proof: str | None = None
    arguments: dict[str, Any] | None = None  # `edit`: the call's new arguments
    response: str | None = None  # `respond`: the operator's text for the model


class ConsumeApproval(WireRequest):
    """The brain spends a granted approval just before it runs the action."""

    approval_id: str
    action_digest: str


class ConsumeResult(WireModel):
    """Only `consumed` lets the action run; every other outcome is the gate's refusal."""

    approval_id: str
    outcome: ConsumeOutcome
    approval: ApprovalView


class WithdrawApproval(WireRequest):
    """The brain stopped a run parked on this request: take the card back (a request no
    longer pending is left as it is)."""

    approval_id: str = Field(pattern=ID_PATTERN)
    run_id: str = Field(pattern=ID_PATTERN)
    reason: str = Field(default="run stopped", max_length=2000)


NoticeKind = Literal[
    "approval.requested",
    "approval.escalated",
    "approval.decided",
    "approval.expired",
    "approval.withdrawn",
]
NOTICE_KINDS: tuple[NoticeKind, ...] = (
    "approval.requested",
    "approval.escalated",
    "approval.decided",
    "approval.expired",
    "approval.withdrawn",
)


class CardLinks(WireModel):
    """Where a person acts on the request: console pages (approve/deny open the console
    on this request with that answer chosen; the person still signs in and confirms), and
    the API route a bot holding its own bearer token POSTs `DecisionBody` to. No link
    carries a credential, so a leaked card decides nothing."""

    view: str
    approve: str
    deny: str
    decision_api: str
    # The console on this request with its edit form or its answer box open.
    edit: str | None = None
    respond: str | None = None


class ApprovalCard(WireModel):
    """What a chat tool shows: argument values are cut at 2,000 characters, as in run
    events; `summary` is one readable line; `changes`, for a staged call, what approving
    applies as lines of text (each path and its diff; `tether_common.changetext`), cut at
    `CARD_CHANGES_CHARS` (the console's card has all of it)."""

    title: str
    summary: str
    tool: str
    arguments: dict[str, Any]
    reason: str
    danger: str
    reach: str
    approval_id: str
    run_id: str
    step: int
    agent: str | None = None
    requester: str | None = None
    tenant: str
    status: ApprovalStatus
    decision: DecidedAs | None = None
    decided_by: str | None = None
    note: str | None = None
    created_at: datetime
    expires_at: datetime
    links: CardLinks
    # An operator's edit (the arguments it ran with, cut like `arguments`) or response.
    edited_arguments: dict[str, Any] | None = None
    response: str | None = None
    # Quorum progress: who may decide now, how many must allow, who already has.
    group: str | None = None
    needed: int = 1
    approved_by: list[str] = Field(default_factory=list)
    changes: str | None = None


class ApprovalNotice(WireModel):
    """One webhook body (signed; `notice_id` is also the `Tether-Delivery` header's
    value, the same on every re-send) and one message on `approval_notices`."""

    notice_id: str
    kind: NoticeKind
    ts: datetime
    card: ApprovalCard


class PresenceQuery(WireRequest):
    """Is an operator who may decide for this agent/owner connected right now?"""

    agent: str | None = None
    owner: str | None = None


class Presence(WireModel):
    approvers: int = Field(ge=0)


class ApprovalEvent(WireModel):
    """One entry of the operator event stream (SSE `id` is `event_id`)."""

    event_id: int
    kind: EventKind
    approval: ApprovalView
    ts: datetime


class WatchApprovals(WireRequest):
    """One poll of an operator's live view held by another service (the brain's console):
    the events after `after` that `token` may see (None: from now on), with the
    operator's presence kept like the event stream's. `session_id` None joins; `beat`
    renews the session (a new one when it is gone or not the token's); `leave` ends it."""

    token: str
    after: int | None = Field(default=None, ge=0)
    session_id: str | None = Field(default=None, pattern=ID_PATTERN, max_length=64)
    beat: bool = False
    leave: bool = False


class ApprovalWatch(WireModel):
    """The events read (in scope only), where the next poll goes on from, the session
    (None once left), and how often it should beat (`PresenceBoard.heartbeat_s`)."""

    session_id: str | None
    events: list[ApprovalEvent]
    last_event_id: int = Field(ge=0)
    heartbeat_s: float = Field(gt=0)


class DecisionBody(_Answering):
    """`POST /v1/approvals/{approval_id}/decision`: `{"decision": "allow_once"}`, or
    `{"decision": "edit", "arguments": {…}}`, or `{"decision": "respond", "text": "…"}`."""
