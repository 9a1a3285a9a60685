"""Run events: numbered per run, journaled with the step, then published on JetStream
(`events.<run_id>`) once the step's commit has returned (their acks read before the run's
next commit). An event is serialised once, when it is made: the journal stores that text
and the bus carries the same bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pydantic import BaseModel

from tether_brain.state.run import Entry, RunState
from tether_common.excerpt import cut
from tether_common.messages.events import EventData
from tether_common.messages.runs import RunEvent
from tether_common.messages.webhooks import notice_kind
from tether_common.subjects import Subjects


class Confirming(Protocol):
    """Sent events whose acks are read later (`tether_common.bus.Acks`)."""

    async def confirmed(self, timeout: float = ...) -> None: ...

    def abandon(self) -> None: ...


class EventsPort(Protocol):
    """Where committed events (and a child's end notice) go: the loop's seam onto the bus.
    `tether_common.bus.Bus` is the real one; `tether_brain.testing.MemoryEvents` keeps
    them in memory."""

    @property
    def subjects(self) -> Subjects: ...

    async def js_send_many(self, items: Sequence[tuple[str, bytes, str]]) -> Confirming: ...

    async def publish(self, subject: str, body: BaseModel) -> None: ...


@dataclass(slots=True)
class Sent:
    """A commit's events, on their way: their acks are read before the run's next commit
    (`loop.completion`), so a step's model call does not wait for them."""

    entries: list[Entry]
    acks: Confirming


def emit(state: RunState, data: EventData, /) -> RunEvent:
    """Number an event and add it to the step's pending journal entries. Only the fields
    set are sent (`messages.events`): an event carries exactly what was said."""
    state.event_seq += 1
    if state.depth:
        data = data.model_copy(update={"depth": state.depth})
        data.model_fields_set.add("depth")
    # Built by the brain from its own values: constructed, not validated again.
    event = RunEvent.model_construct(
        run_id=state.run_id,
        seq=state.event_seq,
        kind=data.KIND,
        ts=datetime.now(UTC),
        data=cut(data.model_dump(mode="json", exclude_unset=True)),
        tenant=state.tenant,
    )
    state.add_event(event)
    return event


async def publish(bus: EventsPort, entries: list[Entry]) -> None:
    """Publish committed events (their journal text) in order, pipelined, and wait for
    the stream to have them; the message id makes a re-publish harmless."""
    await (await send(bus, entries)).acks.confirmed()


async def send(bus: EventsPort, entries: list[Entry]) -> Sent:
    """`publish` without waiting for the acks. An event that makes a run notice goes a
    second time on its run's notable subject, for the approvals service alone."""
    items: list[tuple[str, bytes, str]] = []
    for entry in entries:
        if (e := entry.event) is None:
            continue
        text = entry.text.encode()
        items.append((bus.subjects.run_events(e.run_id), text, f"{e.run_id}:{e.seq}"))
        if notice_kind(e) is not None:
            items.append((bus.subjects.run_notable(e.run_id), text, f"{e.run_id}:{e.seq}:n"))
    return Sent(entries, await bus.js_send_many(items))
