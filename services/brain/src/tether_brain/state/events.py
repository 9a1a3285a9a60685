"""Run events: numbered per run, journaled with the step, then published on JetStream
(`events.<run_id>`) once the step's commit has returned."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tether_brain.state.run import RunState
from tether_common.bus import Bus
from tether_common.excerpt import cut
from tether_common.messages.runs import RunEvent, RunEventKind


def emit(state: RunState, kind: RunEventKind, /, **data: Any) -> RunEvent:
    """Number an event and add it to the step's pending journal entries."""
    state.event_seq += 1
    if state.depth:
        data["depth"] = state.depth
    event = RunEvent(
        run_id=state.run_id,
        seq=state.event_seq,
        kind=kind,
        ts=datetime.now(UTC),
        data=cut(data),
        tenant=state.tenant,
    )
    state.add_event(event)
    return event


async def publish(bus: Bus, events: list[RunEvent]) -> None:
    """Publish committed events in order; the message id makes a re-publish harmless."""
    await bus.js_publish_many(
        [(bus.subjects.run_events(e.run_id), e, f"{e.run_id}:{e.seq}") for e in events]
    )
