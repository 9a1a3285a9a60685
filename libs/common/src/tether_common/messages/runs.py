"""The client API of the brain: start, get, stop, queue a message, follow; and run events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from tether_common.messages.base import MAX_BIGINT, WireModel, WireRequest
from tether_common.messages.deltas import RunDelta
from tether_common.typed_answers import checked_output_schema

RunStatus = Literal[
    "queued", "running", "awaiting_approval", "awaiting_agents", "completed", "stopped", "failed"
]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "stopped", "failed"})
LIVE_STATUSES: frozenset[str] = frozenset({"queued", "running"})  # a replica advances it
PARKED_STATUSES: frozenset[str] = frozenset({"awaiting_approval", "awaiting_agents"})
PermissionMode = Literal["read-only", "allow-reads", "allow-all"]

RunEventKind = Literal[
    "run.start",
    "step",
    "tool.call",
    "tool.result",
    "tool.approval_needed",
    "tool.approved",
    "tool.denied",
    "agent.start",
    "agent.end",
    "skill.used",
    "usage",
    "guard",
    "compaction",
    "run.end",
]


class StartRun(WireRequest):
    prompt: str = Field(min_length=1, max_length=200_000)
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    max_steps: int | None = Field(
        default=None, ge=1, le=1000, description="clamped to the brain's step ceiling (20)"
    )
    allow_shell: bool | None = None
    allow_web: bool | None = None
    mode: PermissionMode | None = None
    guide_only: bool = False
    research: bool = False
    interactive: bool = False
    max_tool_calls: int | None = Field(default=None, ge=0, le=1000)
    # Finite (`WireRequest`) and bounded: a budget past a billion is no budget.
    max_cost: float | None = Field(default=None, ge=0, le=1e9)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_BIGINT)
    max_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)
    # The run's own output schema (`tether_common.typed_answers`): with the agent's own,
    # the answer must fit both, so a run's schema can only narrow its agent's.
    output_schema: dict[str, Any] | None = None

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_output_schema(schema)


class RunAccepted(WireModel):
    run_id: str
    status: RunStatus


class GetRun(WireRequest):
    run_id: str


class StopRun(WireRequest):
    run_id: str


class ChildEnded(WireRequest):
    """A sub-agent's run ended: its parent may resume (any brain replica may take it)."""

    parent_id: str
    child_id: str


class GrantsChanged(WireRequest):
    """An agent's grants were changed through the policy API: every brain replica reloads."""

    agent_id: str


class QueueMessage(WireRequest):
    run_id: str
    text: str = Field(min_length=1, max_length=200_000)


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    estimated: bool = False


class StepView(WireModel):
    step: int
    kind: Literal["model", "tool"]
    text: str
    tool: str | None = None
    call_id: str | None = None
    outcome: str | None = None


class RunView(WireModel):
    run_id: str
    status: RunStatus
    stop_reason: str | None = None
    prompt: str
    answer: str | None = None
    # A typed run's answer as the object its output schema accepted (None: untyped, or
    # no valid answer).
    output: dict[str, Any] | None = None
    provider: str
    model: str | None = None
    steps: list[StepView] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    parent_id: str | None = None
    depth: int = 0
    tenant: str | None = None  # whose run: its principal's tenant and name
    owner: str | None = None
    created_at: datetime
    updated_at: datetime


class ListRuns(WireRequest):
    """Runs, newest first; `before` (a `created_at` from the previous page) pages back."""

    status: RunStatus | None = None
    parent_id: str | None = None
    agent: str | None = Field(default=None, max_length=200)
    since: datetime | None = Field(default=None, description="made at or after this time")
    before: datetime | None = None
    limit: int = Field(default=50, ge=1, le=500)


class RunSummary(WireModel):
    """One line of a run listing: what it is and where it stands (not its steps)."""

    run_id: str
    status: RunStatus
    stop_reason: str | None = None
    prompt: str = Field(description="the first 200 characters")
    provider: str
    model: str | None = None
    step: int
    parent_id: str | None = None
    agent: str | None = None  # as asked at start (None: the default agent)
    tenant: str | None = None  # whose run: its principal's tenant and name
    owner: str | None = None
    created_at: datetime
    updated_at: datetime


class RunList(WireModel):
    runs: list[RunSummary]


class RunEvent(WireModel):
    """One event of a run; `seq` numbers a run's events from 1 (the SSE id)."""

    run_id: str
    seq: int
    kind: RunEventKind
    ts: datetime
    data: dict[str, Any] = Field(default_factory=dict)
    tenant: str | None = None  # the run's tenant (whose events these are)


# The idle bound of a followed run: a live run silent this long ends the stream (`idle`),
# and the client follows again from its last `seq`. Below nats-server's reply windows.
FOLLOW_IDLE_S = 30.0
FOLLOW_IDLE_MAX_S = 60.0


class FollowRun(WireRequest):
    """Follow a run's events over NATS (what `GET /v1/runs/{id}/events` is over HTTP):
    its events after `after_seq`, live until the run ends or `idle_s` of silence."""

    run_id: str
    after_seq: int = Field(default=0, ge=0, le=MAX_BIGINT)
    idle_s: float = Field(default=FOLLOW_IDLE_S, ge=0.1, le=FOLLOW_IDLE_MAX_S)
    deltas: bool = False  # the model's live text between the events (`RunDelta` frames)


class RunEventFrame(WireModel):
    """One message of a followed run's streamed reply: an event, a delta (live text,
    when asked for; never counted in `last_seq`), or the terminal frame (`end`:
    `run_end` when the run ended, `idle` after the idle bound)."""

    event: RunEvent | None = None
    delta: RunDelta | None = None
    end: Literal["run_end", "idle"] | None = None
    last_seq: int = 0  # the terminal frame: the last `seq` sent (follow again after it)

    @property
    def terminal(self) -> bool:
        return self.end is not None
