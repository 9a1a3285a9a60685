"""Policy what-if over HTTP (`POST /v1/policy/replay`, `POST /v1/policy/suggest`): the
views the brain answers and the client reads (one definition for both sides). The bodies
are the brain's own: a proposal is validated by the agents API's model.

A recorded call's `outcome` says what happened to it: `ran` (the gates allowed it),
`approved` / `denied` / `expired` (an operator's decision, or none in time), `refused`
(the gates denied it), `stale` (approved, but the action changed before it ran),
`pending` (still waiting, or its run stopped), `deferred` (another call of its step was
waiting for an operator)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "DEFAULT_REPLAY_LIMIT",
    "MAX_REPLAY_LIMIT",
    "ChangedCall",
    "Narrowed",
    "Outcome",
    "ReplayReport",
    "Suggestion",
    "Uncovered",
]

Decision = Literal["allow", "ask", "deny"]
Outcome = Literal["ran", "approved", "denied", "expired", "refused", "stale", "pending", "deferred"]
DEFAULT_REPLAY_LIMIT = 100
MAX_REPLAY_LIMIT = 1000


class ChangedCall(BaseModel):
    """One recorded call re-decided: `before` as recorded, `after` under the proposal."""

    run_id: str
    call_id: str
    at: datetime
    tool: str
    # As run events carry them: long strings cut at 2,000 characters (`excerpt.cut`).
    arguments: dict[str, Any]
    before: Decision
    after: Decision
    outcome: Outcome
    decided_by: str | None = None
    code: str | None = None  # the gate code of `after` (what would ask or deny)
    reason: str = ""
    quorum: int | None = None  # how many people `after` would need (None: one)

    @property
    def transition(self) -> str:
        return f"{self.before}->{self.after}"


class ReplayReport(BaseModel):
    """`transitions` and `by_tool` count every changed call of the window; `changes`
    lists them (every call with `only_changed: false`), at most `limit` (`truncated`).
    `complete` is false when the window held more runs than one answer reads: ask
    again from `next_since`. `skipped` counts calls that could not be re-decided, by
    reason (`unknown_tool`: no longer in the catalogue; `unmatched`: the journal holds
    no call whose argument digests match the audit record)."""

    agent: str
    since: datetime
    until: datetime
    runs: int
    calls: int
    changed: int
    transitions: dict[str, int] = Field(default_factory=dict)
    by_tool: dict[str, dict[str, int]] = Field(default_factory=dict)
    changes: list[ChangedCall] = Field(default_factory=list)
    truncated: bool = False
    complete: bool = True
    next_since: datetime | None = None
    skipped: dict[str, int] = Field(default_factory=dict)


class Narrowed(BaseModel):
    """A current entry replaced by entries that each allow no more than it did."""

    entry: str
    to: list[str]


class Uncovered(BaseModel):
    """An allowed or approved call no grant can allow without also allowing a denied
    one (their constrainable arguments are the same)."""

    run_id: str
    call_id: str
    tool: str
    why: str


class Suggestion(BaseModel):
    """The narrowest grants for the window's history, as a diff against `current`;
    never applied. `verified`: replaying `grants` allowed every allowed or approved call
    (as far as grants decide) and granted no denied one; `problems` says otherwise."""

    agent: str
    since: datetime
    until: datetime
    calls: int
    wanted: int
    refused: int
    current: list[str]
    grants: list[str]
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    narrowed: list[Narrowed] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list)
    uncovered: list[Uncovered] = Field(default_factory=list)
    verified: bool = True
    problems: list[str] = Field(default_factory=list)
    complete: bool = True
