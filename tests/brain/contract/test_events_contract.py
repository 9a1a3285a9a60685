"""The events seam's contract (`state.events.EventsPort`): the same cases against the
in-memory events the in-process tier uses (`tether_brain.testing.MemoryEvents`) and the
real bus on a real nats-server, so the fake cannot drift from what it stands for. Events
sent are on their run's stream in order once their acks are read, each once however often
it is sent, and an event that makes a run notice also on the run's notable subject."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from tether_brain.state.events import EventsPort, emit, publish, send
from tether_brain.state.run import Entry, Limits, RunState
from tether_brain.testing import MemoryEvents
from tether_common.bus import Bus
from tether_common.messages.events import Guard, RunEnd


@pytest.fixture
async def nats_events(bus: Bus) -> EventsPort:
    await bus.ensure_streams()
    return bus


# The bus's side asks for nats-server only when it runs, so it is marked here.
@pytest.fixture(params=["memory", pytest.param("nats", marks=pytest.mark.stack)])
def events(request: pytest.FixtureRequest) -> EventsPort:
    """Each case against both; only the real one starts nats-server."""
    if request.param == "memory":
        return MemoryEvents()
    found: EventsPort = request.getfixturevalue("nats_events")
    return found


async def stored(events: EventsPort, run_id: str, *, notable: bool = False) -> list[int]:
    """The `seq` of each event of the run on its events (or notable) subject, in order."""
    if isinstance(events, MemoryEvents):
        kept = events.notable if notable else events.published
        return [e.seq for e in kept if e.run_id == run_id]
    assert isinstance(events, Bus)
    subjects = events.subjects
    subject = subjects.run_notable(run_id) if notable else subjects.run_events(run_id)
    found = []
    async for data in events.replay(subject, idle_s=0.5):
        if data is None:
            break
        found.append(json.loads(data)["seq"])
    return found


def committed(count: int, *, ending: bool = False) -> tuple[RunState, list[Entry]]:
    now = datetime.now(UTC)
    state = RunState(f"run_{uuid.uuid4().hex}", "p", "scripted", "m", Limits(5), now, now)
    for step in range(count):
        emit(state, Guard(step=step, kind="loop_broken"))
    if ending:
        emit(state, RunEnd(status="completed", answer="done"))
    return state, list(state.pending)


async def test_events_sent_are_stored_in_order_once_their_acks_are_read(
    events: EventsPort,
) -> None:
    state, entries = committed(6)
    first = await send(events, entries[:3])
    second = await send(events, entries[3:])  # before the first's acks are read
    await first.acks.confirmed()
    await second.acks.confirmed()
    assert await stored(events, state.run_id) == [1, 2, 3, 4, 5, 6]


async def test_an_event_sent_again_is_stored_once(events: EventsPort) -> None:
    state, entries = committed(4)
    await publish(events, entries[:2])
    await publish(events, entries)  # a failed batch sent again, in front of the next one's
    assert await stored(events, state.run_id) == [1, 2, 3, 4]


async def test_a_run_notice_goes_also_on_the_notable_subject(events: EventsPort) -> None:
    state, entries = committed(2, ending=True)
    await publish(events, entries)
    assert await stored(events, state.run_id, notable=True) == [3]
    assert await stored(events, state.run_id) == [1, 2, 3]
