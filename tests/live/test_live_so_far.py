"""The writing replica's answer to a late reader's ask, on a real NATS server: the turn's
text so far, from offset 0, in pieces that keep each delta far below the payload limit;
the live deltas say their offsets; a replica not writing the run stays quiet."""

from __future__ import annotations

from nats.aio.subscription import Subscription

from tether_brain.clients.model import SO_FAR_CHARS, LiveTarget, LiveText, ModelClient
from tether_common.bus import Bus
from tether_common.messages.deltas import DeltaAsk, RunDelta

WAIT_S = 30.0


async def heard(sub: Subscription, until: str) -> list[RunDelta]:
    """Deltas until the text from offset 0 on reads `until` (offsets placed)."""
    deltas: list[RunDelta] = []
    text = ""
    while text != until:
        delta = RunDelta.model_validate_json((await sub.next_msg(timeout=WAIT_S)).data)
        deltas.append(delta)
        assert delta.offset is not None
        if delta.offset == 0:
            text = ""  # an answer to an ask starts the step's text again
        assert delta.offset == len(text), (delta.offset, len(text))
        text += delta.text
    return deltas


async def test_an_ask_is_answered_with_the_text_so_far_in_pieces(bus: Bus) -> None:
    subject = bus.subjects.run_deltas("run_late")
    sub = await bus.subscribe_raw(subject)
    await bus.round_trip(WAIT_S)  # the server has the subscription
    writer = ModelClient(bus, timeout_s=1.0)
    live = LiveText(
        bus, LiveTarget(subject, "run_late", step=1, seq_after=1, tenant=None, depth=None)
    )
    long_text = "".join(f"word{i} " for i in range(SO_FAR_CHARS // 5))  # above one piece
    await live.add(long_text)
    live_deltas = await heard(sub, long_text)
    assert [d.offset for d in live_deltas] == [0]

    await ModelClient(bus, timeout_s=1.0).on_ask(DeltaAsk(run_id="run_late"))  # not writing it
    writer.writing["run_late"] = live  # as `generate` registers the turn it writes
    await writer.on_ask(DeltaAsk(run_id="run_late"))
    answer = await heard(sub, long_text)
    assert [d.offset for d in answer] == list(range(0, len(long_text), SO_FAR_CHARS))
    assert len(answer) > 1
    await live.add("more")
    after = RunDelta.model_validate_json((await sub.next_msg(timeout=WAIT_S)).data)
    assert (after.offset, after.text) == (len(long_text), "more")  # goes on where it was
    await live.close()
    await sub.unsubscribe()
