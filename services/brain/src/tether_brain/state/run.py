"""A run's state in memory, and the journal entries a step appends.

The journal is append-only: a step adds messages, step records and events; the run row
holds only counters, limits and status. Reading a run back replays its journal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from tether_brain.state.options import RunOptions
from tether_brain.state.sizes import message_chars
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.identity import DEFAULT_TENANT
from tether_common.messages.runs import RunEvent, RunStatus, StepView, Usage

if TYPE_CHECKING:
    from tether_brain.state.events import Sent

EntryKind = Literal["message", "step", "event"]


DEFAULT_AGENT = "default"  # the agent a run uses when it names none


@dataclass(slots=True)
class Entry:
    """A journal entry, serialised once when it is added: the same JSON text is stored
    in the journal and, for an event, published on the bus after the commit."""

    kind: EntryKind
    text: str
    event: RunEvent | None = None  # an event entry's event (its subject and message id)


@dataclass(slots=True)
class Counters:
    """What the loop's rules remember between steps; saved with every commit."""

    tool_calls: int = 0
    corrections: int = 0
    nudges: int = 0
    reminders: int = 0
    retrievals: int = 0
    coercions: int = 0
    rejections: int = 0
    repairs: int = 0  # answers sent back for not fitting the run's output schema
    audit_next: int = 0  # the next audit record's sequence (the lease holder keeps the trail)
    low_effort: bool = False
    tainted: bool = False
    pending_approval: dict[str, Any] | None = None
    pending_children: dict[str, str] | None = None  # call id → child run id
    # Tools an operator allowed "for this chat" (`allow_chat`): kept with the counters so
    # they outlive a park and reload, and the thread's next runs start with them.
    chat_grants: list[str] = field(default_factory=list)
    # Tools allowed for the rest of this run (`allow_run`, `allow_chat`): the options the
    # step commit saves are the run's start options, so a grant lives here and is folded
    # back into them on load (`persistence/tables.state_of`), surviving a park or takeover.
    run_grants: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """As `dataclasses.asdict` gives it (containers copied, so a change to the state
        after the step's commit was asked for is not in the row), at a fifth of its cost:
        every step's commit writes it."""
        return {name: _copied(getattr(self, name)) for name in _COUNTER_FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Counters:
        return cls(**{k: v for k, v in data.items() if k in _COUNTER_FIELDS})


_COUNTER_FIELDS = tuple(f.name for f in fields(Counters))


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    max_steps: int
    max_tool_calls: int | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    max_seconds: float | None = None


def call_key(name: str, arguments: dict[str, Any]) -> str:
    """Identical calls: same name and same canonical arguments."""
    return name + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class RunState:
    run_id: str
    prompt: str
    provider: str
    model: str | None
    limits: Limits
    created_at: datetime
    updated_at: datetime
    status: RunStatus = "queued"
    stop_reason: str | None = None
    answer: str | None = None
    output: dict[str, Any] | None = None  # a typed run's answer, as its schemas accepted it
    step: int = 0
    journal_seq: int = 0
    event_seq: int = 0
    fence: int = 0
    takeovers: int = 0
    active_seconds: float = 0.0
    options: RunOptions = field(default_factory=RunOptions)
    counters: Counters = field(default_factory=Counters)
    messages: list[ChatMessage] = field(default_factory=list)
    steps: list[StepView] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cache: dict[str, str] = field(default_factory=dict)
    stop_requested: bool = False
    audit_head: str | None = None
    parent_id: str | None = None
    depth: int = 0
    # Who the run belongs to (its principal's tenant and name); a sub-agent inherits both.
    tenant: str = DEFAULT_TENANT
    owner: str | None = None
    # The W3C traceparent every segment of the run's work is a child of, fixed when the
    # run is made (`tether_common.traces.traceparent`); None for runs stored before it.
    trace_parent: str | None = None
    pending: list[Entry] = field(default_factory=list)
    published: list[Entry] = field(default_factory=list)  # the last commit's entries
    unpublished: list[Entry] = field(default_factory=list)  # committed events, not yet on the bus
    sending: Sent | None = None  # the last commit's events, their acks not read yet
    # The history's size as the context estimate counts it (`sizes.message_chars`), kept
    # as messages are added so a step does not walk the whole history to know it.
    history_chars: int = 0
    # Each message's JSON, made once when it was added (the journal's text of it): a
    # step's request carries them as they are (`context.wire`).
    message_json: list[str] = field(default_factory=list)
    # Where the last user message is, and the messages by `name` (tool results by tool,
    # skill notes): what a request's layout looks for without walking the history.
    last_user_at: int = -1
    named_at: dict[str, list[int]] = field(default_factory=dict)
    # What the loop layer has read of the history so far (`loop.finishing.Digest`), so a
    # step reads only the messages added since; in memory only, rebuilt after a load.
    read_ahead: object | None = None
    audit: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # for the next commit

    def audit_later(self, event: str, data: dict[str, Any]) -> None:
        """An audit record, written in the same transaction as the step's journal."""
        self.audit.append((event, data))

    @property
    def max_steps(self) -> int:
        return self.limits.max_steps

    def add_message(self, message: ChatMessage) -> None:
        text = message.model_dump_json()
        self._append(message, text)
        self.pending.append(Entry("message", text))

    def _append(self, message: ChatMessage, text: str) -> None:
        """The history grows by one message, and what is kept of it with it."""
        self._remember(message)
        if message.role == "user":
            self.last_user_at = len(self.messages)
        if message.name:
            self.named_at.setdefault(message.name, []).append(len(self.messages))
        self.messages.append(message)
        self.history_chars += message_chars(message)
        self.message_json.append(text)

    def add_step(self, view: StepView) -> None:
        self.steps.append(view)
        self.pending.append(Entry("step", view.model_dump_json()))

    def add_event(self, event: RunEvent) -> None:
        self.pending.append(Entry("event", event.model_dump_json(), event))

    def replay(self, kind: EntryKind, data: dict[str, Any]) -> None:
        """Rebuild in-memory history from one stored journal entry."""
        if kind == "message":
            message = ChatMessage.model_validate(data)
            self._append(message, message.model_dump_json())
        elif kind == "step":
            self.steps.append(StepView.model_validate(data))

    @property
    def own_messages(self) -> list[ChatMessage]:
        """This run's messages, without the thread's earlier turns that open the history."""
        return self.messages[self.options.history :]

    def _remember(self, message: ChatMessage) -> None:
        """Successful results feed the identical-call cache (also when replayed); a
        thread's earlier turns do not (their results are not this turn's)."""
        if message.role != "tool" or message.content.startswith("FAILED"):
            return
        if len(self.messages) < self.options.history:
            return
        call = self.call_by_id(message.tool_call_id)
        if call is not None:
            self.cache[call_key(call.name, call.arguments)] = message.content

    def call_by_id(self, call_id: str | None) -> CallRecord | None:
        for message in reversed(self.messages):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call
        return None

    def unanswered_calls(self) -> list[CallRecord]:
        """Calls of the last assistant message that have no result yet (a crash mid-step)."""
        answered = {m.tool_call_id for m in self.messages if m.role == "tool"}
        for message in reversed(self.messages):
            if message.role == "assistant":
                return [c for c in message.tool_calls if c.id not in answered]
        return []


def add_usage(total: Usage, more: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cost=total.cost + more.cost,
        estimated=total.estimated or more.estimated,
    )
