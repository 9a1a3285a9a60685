"""Run events, typed: one model per event kind for its `data`, and a union of whole
events discriminated on `kind`, shared by the brain (which emits the data models), the
SSE face and the client (which reads events through `typed`).

The wire stays `messages.runs.RunEvent` (`kind` and a `data` object, field names as
they always were), so stored journals still load: every data model ignores nothing it
does not know (`extra="allow"`, kept on a re-dump) and gives a default to every field a
kind did not always carry. The brain dumps only the fields it set (`exclude_unset`), so
an event carries exactly what it said.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tether_common.messages.runs import RunEvent, RunEventKind, RunStatus

__all__ = [
    "AgentEnd",
    "AgentEndEvent",
    "AgentStart",
    "AgentStartEvent",
    "Compaction",
    "CompactionEvent",
    "EventData",
    "Guard",
    "GuardEvent",
    "RunEnd",
    "RunEndEvent",
    "RunStart",
    "RunStartEvent",
    "SkillUsed",
    "SkillUsedEvent",
    "Step",
    "StepEvent",
    "ToolApprovalNeeded",
    "ToolApprovalNeededEvent",
    "ToolApproved",
    "ToolApprovedEvent",
    "ToolCall",
    "ToolCallEvent",
    "ToolDenied",
    "ToolDeniedEvent",
    "ToolResult",
    "ToolResultEvent",
    "TypedEvent",
    "UsageData",
    "UsageEvent",
    "typed",
]


class EventData(BaseModel):
    """The `data` of one event kind; `KIND` names it."""

    model_config = ConfigDict(extra="allow")
    KIND: ClassVar[RunEventKind]

    depth: int | None = None  # set on a sub-agent's events (1 child, 2 grandchild)


class RunStart(EventData):
    KIND = "run.start"
    prompt: str = ""
    provider: str = ""
    model: str | None = None
    trace_id: str | None = None


class Step(EventData):
    KIND = "step"
    step: int = 0
    kind: str = "model"
    text: str = ""
    thinking: str | None = None


class ToolCall(EventData):
    KIND = "tool.call"
    step: int = 0
    call_id: str = ""
    name: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResult(EventData):
    KIND = "tool.result"
    step: int = 0
    call_id: str = ""
    name: str = ""
    ok: bool = False
    error_code: str | None = None
    content: str = ""
    cached: bool = False
    duration_ms: float | None = None
    output_ref: str | None = None  # the whole output, for the console's download
    repairs: list[Any] | None = None


class ToolApprovalNeeded(EventData):
    KIND = "tool.approval_needed"
    step: int = 0
    approval_id: str = ""
    call_id: str = ""
    name: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    code: str | None = None
    reason: str = ""
    reach: str = ""
    danger: str = "none"
    expires_at: str | None = None


class ToolApproved(EventData):
    KIND = "tool.approved"
    step: int = 0
    approval_id: str = ""
    call_id: str = ""
    name: str = ""
    decision: str = ""
    by: str | None = None


class ToolDenied(EventData):
    """Refused at a gate (`code`) or by an operator's decision (`approval_id`, `by`)."""

    KIND = "tool.denied"
    step: int = 0
    call_id: str = ""
    name: str = ""
    code: str | None = None
    approval_id: str | None = None
    decision: str | None = None
    by: str | None = None


class AgentStart(EventData):
    KIND = "agent.start"
    step: int = 0
    call_id: str = ""
    child_run_id: str = ""
    task: str | None = None


class AgentEnd(EventData):
    KIND = "agent.end"
    step: int = 0
    call_id: str = ""
    child_run_id: str = ""
    ok: bool = False


class SkillUsed(EventData):
    KIND = "skill.used"
    step: int = 0
    name: str | None = None
    via: str = ""
    truncated: bool = False


class UsageData(EventData):
    KIND = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    estimated: bool = False


class Guard(EventData):
    """A rule of the loop acted: `kind` says which (waiting, loop_broken, interrupted, …);
    the other fields are set by the kinds that have them."""

    KIND = "guard"
    step: int = 0
    kind: str = ""
    trigger: str | None = None
    name: str | None = None
    names: list[str] | None = None
    calls: list[str] | None = None
    why: str | None = None
    reason: str | None = None
    service: str | None = None
    call_id: str | None = None
    wait_s: float | None = None
    # `model_fallback`: the model that failed (`provider`, `model`, its error `code`,
    # `reason` the condition, `why` its message) and the one asked next (`to_*`).
    provider: str | None = None
    model: str | None = None
    code: str | None = None
    to_provider: str | None = None
    to_model: str | None = None


class Compaction(EventData):
    KIND = "compaction"
    step: int = 0
    actions: list[str] = Field(default_factory=list)
    dropped: int = 0
    summarised: bool = False


class RunEnd(EventData):
    KIND = "run.end"
    status: RunStatus = "failed"
    stop_reason: str | None = None
    answer: str | None = None
    output: dict[str, Any] | None = None  # a typed run's validated answer
    steps: int = 0
    usage: UsageData = Field(default_factory=UsageData)
    # The run's agent: which webhook endpoints of its tenant hear of its end.
    agent: str | None = None


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_id: str
    seq: int
    ts: datetime
    tenant: str | None = None


class RunStartEvent(_Event):
    kind: Literal["run.start"]
    data: RunStart


class StepEvent(_Event):
    kind: Literal["step"]
    data: Step


class ToolCallEvent(_Event):
    kind: Literal["tool.call"]
    data: ToolCall


class ToolResultEvent(_Event):
    kind: Literal["tool.result"]
    data: ToolResult


class ToolApprovalNeededEvent(_Event):
    kind: Literal["tool.approval_needed"]
    data: ToolApprovalNeeded


class ToolApprovedEvent(_Event):
    kind: Literal["tool.approved"]
    data: ToolApproved


class ToolDeniedEvent(_Event):
    kind: Literal["tool.denied"]
    data: ToolDenied


class AgentStartEvent(_Event):
    kind: Literal["agent.start"]
    data: AgentStart


class AgentEndEvent(_Event):
    kind: Literal["agent.end"]
    data: AgentEnd


class SkillUsedEvent(_Event):
    kind: Literal["skill.used"]
    data: SkillUsed


class UsageEvent(_Event):
    kind: Literal["usage"]
    data: UsageData


class GuardEvent(_Event):
    kind: Literal["guard"]
    data: Guard


class CompactionEvent(_Event):
    kind: Literal["compaction"]
    data: Compaction


class RunEndEvent(_Event):
    kind: Literal["run.end"]
    data: RunEnd


TypedEvent = Annotated[
    RunStartEvent
    | StepEvent
    | ToolCallEvent
    | ToolResultEvent
    | ToolApprovalNeededEvent
    | ToolApprovedEvent
    | ToolDeniedEvent
    | AgentStartEvent
    | AgentEndEvent
    | SkillUsedEvent
    | UsageEvent
    | GuardEvent
    | CompactionEvent
    | RunEndEvent,
    Field(discriminator="kind"),
]
_EVENTS: TypeAdapter[TypedEvent] = TypeAdapter(TypedEvent)


def typed(event: RunEvent) -> TypedEvent:
    """The event as its kind's model (a `ValidationError` for data its kind cannot hold)."""
    return _EVENTS.validate_python(event.model_dump(exclude={"version"}))
