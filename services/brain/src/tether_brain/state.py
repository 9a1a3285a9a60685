"""A run's state in memory, and the journal entries a step appends.

The journal is append-only: a step adds messages, step records and events; the run row
holds only counters and status. Reading a run back replays its journal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tether_common.messages.gateway import ChatMessage
from tether_common.messages.runs import RunEvent, RunStatus, StepView, Usage

EntryKind = Literal["message", "step", "event"]


@dataclass(slots=True)
class Entry:
    kind: EntryKind
    data: dict[str, Any]


@dataclass(slots=True)
class RunState:
    run_id: str
    prompt: str
    provider: str
    model: str | None
    max_steps: int
    created_at: datetime
    updated_at: datetime
    status: RunStatus = "queued"
    stop_reason: str | None = None
    answer: str | None = None
    step: int = 0
    journal_seq: int = 0
    event_seq: int = 0
    fence: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    messages: list[ChatMessage] = field(default_factory=list)
    steps: list[StepView] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    pending: list[Entry] = field(default_factory=list)

    def add_message(self, message: ChatMessage) -> None:
        self.messages.append(message)
        self.pending.append(Entry("message", message.model_dump(mode="json")))

    def add_step(self, view: StepView) -> None:
        self.steps.append(view)
        self.pending.append(Entry("step", view.model_dump(mode="json")))

    def add_event(self, event: RunEvent) -> None:
        self.pending.append(Entry("event", event.model_dump(mode="json")))

    def replay(self, kind: EntryKind, data: dict[str, Any]) -> None:
        """Rebuild in-memory history from one stored journal entry."""
        if kind == "message":
            self.messages.append(ChatMessage.model_validate(data))
        elif kind == "step":
            self.steps.append(StepView.model_validate(data))
