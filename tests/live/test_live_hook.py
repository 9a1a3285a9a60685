"""The brain's live-text hook on a real NATS server: a turn's text is coalesced into fewer
deltas than the model's chunks, none lost, and text left waiting goes out on its own
within the interval; a delta names the run's last durable event (not the step's own,
still pending) and a sub-agent's depth."""

from __future__ import annotations

from datetime import UTC, datetime

from tether_brain.clients.model import LiveTarget, LiveText, ModelClient
from tether_brain.state.events import emit
from tether_brain.state.run import Limits, RunState
from tether_common.bus import Bus
from tether_common.messages.deltas import RunDelta
from tether_common.messages.events import Compaction, RunStart

WAIT_S = 30.0


async def test_chunks_are_coalesced_and_none_is_lost(bus: Bus) -> None:
    subject = bus.subjects.run_deltas("run_hook")
    sub = await bus.subscribe_raw(subject)
    await bus.round_trip(WAIT_S)  # the server has the subscription
    target = LiveTarget(subject, "run_hook", step=2, seq_after=5, tenant="acme", depth=None)
    live = LiveText(bus, target)
    pieces = [f"word{i} " for i in range(200)]
    for piece in pieces:
        await live.add(piece)
    # No `close()`: what waits after the last chunk is sent by the timer.
    deltas: list[RunDelta] = []
    while "".join(d.text for d in deltas) != "".join(pieces):
        deltas.append(RunDelta.model_validate_json((await sub.next_msg(timeout=WAIT_S)).data))
    await live.close()
    assert 1 < len(deltas) < len(pieces)
    assert {(d.run_id, d.step, d.seq_after, d.tenant, d.depth) for d in deltas} == {
        ("run_hook", 2, 5, "acme", None)
    }
    await sub.unsubscribe()


def test_a_delta_follows_the_last_durable_event_and_carries_depth(bus: Bus) -> None:
    now = datetime.now(UTC)
    state = RunState("run_child", "a task", "scripted", None, Limits(max_steps=4), now, now)
    state.depth, state.step = 1, 3
    emit(state, RunStart(prompt="a task"))
    state.pending.clear()  # committed: durable
    emit(state, Compaction(step=3))  # this step's own event: not yet durable
    target = ModelClient(bus, timeout_s=1.0).live_target(state)
    assert (target.seq_after, target.step, target.depth) == (1, 3, 1)
    assert target.subject == bus.subjects.run_deltas("run_child")
