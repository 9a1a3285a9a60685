"""Merging a run's live text by offset, without a stack: the answer to a late reader's ask
(the step's text so far, from offset 0) overlaps live deltas heard before and after it,
and the reader is given each character of the step once, in order (a delta past a gap
waits for the answer, for a while); `tether chat` does the same across its reconnects."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tether_brain.runs.merging import GAP_WAIT_S, TextMerge
from tether_brain.runs.streaming import Live, _ordered
from tether_client.chat_cli import rest_of, unseen
from tether_common.messages.deltas import RunDelta
from tether_common.messages.runs import RunEvent

TEXT = "Let me think it over, then answer."


def delta(offset: int | None, text: str, *, step: int = 1, seq_after: int = 1) -> RunDelta:
    return RunDelta(run_id="run_m", step=step, seq_after=seq_after, text=text, offset=offset)


def event(seq: int, kind: str = "run.start") -> RunEvent:
    return RunEvent(run_id="run_m", seq=seq, kind=kind, ts=datetime.now(UTC))


async def merged(items: list[Live]) -> list[Live]:
    queue: asyncio.Queue[Live | None] = asyncio.Queue()
    for item in [*items, None]:
        queue.put_nowait(item)
    return [item async for item in _ordered(queue, 0)]


def live_text(items: list[Live]) -> str:
    return "".join(item.text for item in items if isinstance(item, RunDelta))


PIECES = [(k, TEXT[k : k + 5]) for k in range(0, len(TEXT), 5)]  # offset, text


@given(data=st.data())
async def test_the_answer_to_an_ask_and_the_live_deltas_give_each_character_once(
    data: st.DataObject,
) -> None:
    # The reader hears the live deltas from piece `first` on (those before were written
    # before it listened); it asked once `asked` characters were written (all of the
    # unheard pieces, at least), and the answer comes after the live deltas written
    # before it.
    first = data.draw(st.integers(0, len(PIECES)), label="first")
    written_unheard = min(first * 5, len(TEXT))
    asked = data.draw(st.integers(written_unheard, len(TEXT)), label="asked")
    heard = [delta(k, piece) for k, piece in PIECES[first:]]
    before = [d for d in heard if (d.offset or 0) < asked]
    after = [d for d in heard if (d.offset or 0) >= asked]
    shown = live_text(await merged([event(1), *before, delta(0, TEXT[:asked]), *after]))
    assert shown == TEXT


async def test_a_late_reader_with_nothing_else_gets_the_text_so_far_once() -> None:
    items: list[Live] = [event(1), delta(0, "Let me"), delta(6, " think"), delta(0, "Let me")]
    assert live_text(await merged(items)) == "Let me think"


async def test_a_delta_that_does_not_say_its_offset_is_taken_as_it_is() -> None:
    items: list[Live] = [event(1), delta(None, "old "), delta(None, "brain")]
    assert live_text(await merged(items)) == "old brain"


async def test_each_step_is_merged_on_its_own() -> None:
    items: list[Live] = [
        event(1),
        delta(0, "first", step=1),
        event(2, "step"),
        delta(0, "second", step=2, seq_after=2),
        delta(0, "second", step=2, seq_after=2),
    ]
    assert live_text(await merged(items)) == "firstsecond"


def test_the_chat_writes_only_what_the_terminal_has_not_shown() -> None:
    assert unseen("Let me", delta(0, "Let me think")) == " think"
    assert unseen("Let me think", delta(0, "Let me")) == ""
    assert unseen("", delta(6, " think")) == " think"  # a gap: what came is still shown
    assert unseen("Let me", delta(None, "Let me")) == "Let me"  # not said: all new


def test_a_delta_past_a_gap_comes_as_it_is_once_the_answer_is_overdue() -> None:
    now = [100.0]
    text = TextMerge(clock=lambda: now[0])
    assert text.take(delta(6, " think")) == []  # waits for the text before it
    assert text.wait_s() == GAP_WAIT_S
    now[0] += GAP_WAIT_S
    assert text.wait_s() == 0.0
    assert [d.text for d in text.expire()] == [" think"]
    assert text.wait_s() is None
    assert [d.text for d in text.take(delta(0, "Let me think it"))] == [" it"]


def test_a_delta_that_waits_is_dropped_once_the_steps_event_passes() -> None:
    text = TextMerge()
    assert text.take(delta(6, " think", seq_after=1)) == []
    text.passed(2)  # the step's own event: it carries the whole text
    assert text.wait_s() is None
    assert text.expire() == []


def test_the_chat_ends_a_turn_with_what_its_live_text_fell_short_of() -> None:
    assert rest_of("It is 18:00.", "It is") == " 18:00."  # written on, on the same line
    assert rest_of("It is 18:00.", "It is 18:00.") == ""
    assert rest_of("It is 18:00.", "It is 18:00.\n") == ""
    assert rest_of("It is 18:00.", "is 18:00.") is None  # said anew, whole
    assert rest_of("It is 18:00.", "") is None
