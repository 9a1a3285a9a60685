"""Run events as readable terminal lines, and the style each kind is shown in."""

from __future__ import annotations

import json
from typing import assert_never

from pydantic import ValidationError

from tether_common.messages.events import (
    AgentEndEvent,
    AgentStartEvent,
    CompactionEvent,
    GuardEvent,
    RunEndEvent,
    RunStartEvent,
    SkillUsedEvent,
    StepEvent,
    ToolApprovalNeededEvent,
    ToolApprovedEvent,
    ToolCallEvent,
    ToolDeniedEvent,
    ToolResultEvent,
    TypedEvent,
    UsageEvent,
    typed,
)
from tether_common.messages.runs import RunEvent

RULES_NOTE = "(rules: a deterministic planner, not a language model)"

_STYLES = {
    "run.start": "bold",
    "tool.call": "cyan",
    "tool.approval_needed": "bold yellow",
    "tool.approved": "green",
    "tool.denied": "red",
    "guard": "yellow",
}


def style(event: RunEvent) -> str:
    read = typed_or_none(event)
    if isinstance(read, ToolResultEvent):
        return "green" if read.data.ok else "red"
    if isinstance(read, RunEndEvent):
        return "bold green" if read.data.status == "completed" else "bold red"
    if event.kind == "step":
        return "dim"
    return _STYLES.get(event.kind, "")


def render(event: RunEvent) -> str | None:
    """The event as a line (None: not shown). An event whose data its kind cannot hold
    (a newer brain's, or a damaged journal) is shown raw, never dropped."""
    read = typed_or_none(event)
    if read is None:
        return f"  [{event.kind}] {json.dumps(event.data, ensure_ascii=False)[:300]}"
    return _line(read)


def _line(event: TypedEvent) -> str | None:
    match event:
        case RunStartEvent(data=d):
            note = f" {RULES_NOTE}" if d.provider == "rules" else ""
            return f"▶ run {event.run_id} — provider {d.provider}{note}"
        case StepEvent(data=d):
            return f"  … thinking: {d.thinking[:300]}" if d.thinking else None
        case ToolCallEvent(data=d):
            return f"→ {d.name} {json.dumps(d.arguments, ensure_ascii=False)}"
        case ToolResultEvent(data=d):
            return f"← {'✓' if d.ok else '✗'} {d.name}: {d.content}"
        case RunEndEvent(data=d):
            reason = f" ({d.stop_reason})" if d.stop_reason else ""
            return f"■ {d.status}{reason}\n{d.answer or ''}"
        case (
            GuardEvent()
            | CompactionEvent()
            | SkillUsedEvent()
            | AgentStartEvent()
            | AgentEndEvent()
        ):
            said = event.data.model_dump(mode="json", exclude_unset=True)
            return f"  [{event.kind}] {json.dumps(said, ensure_ascii=False)[:300]}"
        case ToolApprovalNeededEvent(data=d):
            return f"  [{event.kind}] {d.name} {d.reason} (approval {d.approval_id or '?'})"
        case ToolApprovedEvent(data=d) | ToolDeniedEvent(data=d):
            return f"  [{event.kind}] {d.name} "
        case UsageEvent():
            return None
        case _:
            assert_never(event)


def typed_or_none(event: RunEvent) -> TypedEvent | None:
    """The event as its kind's model, or None when its data does not fit the kind."""
    try:
        return typed(event)
    except ValidationError:
        return None
