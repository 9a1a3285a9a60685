"""`until` / `until_sync`: the suite's one way to wait for what no event announces."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest

from tether_common.testing import until, until_sync


def answers(*values: object) -> Iterator[object]:
    """`values` one by one, then the last one for ever."""
    yield from values
    while True:
        yield values[-1]


async def test_the_first_truthy_answer_of_an_async_check_is_returned() -> None:
    seen = answers(None, 0, [], {"status": "done"})

    async def check() -> object:
        await asyncio.sleep(0)
        return next(seen)

    assert await until(check, timeout=5, every=0.001, what="done") == {"status": "done"}


async def test_a_sync_check_is_polled_by_the_async_form_too() -> None:
    calls: list[int] = []

    def check() -> int | None:
        calls.append(1)
        return len(calls) if len(calls) == 3 else None

    assert await until(check, timeout=5, every=0.001, what="three calls") == 3
    assert len(calls) == 3  # not called again once answered


@pytest.mark.parametrize("last", [None, False, 0, "", []])
async def test_a_timeout_names_what_was_awaited_and_the_last_answer(last: object) -> None:
    seen = answers(None, last)
    started = time.monotonic()
    with pytest.raises(AssertionError) as caught:
        await until(lambda: next(seen), timeout=0.3, every=0.01, what="the run to end")
    took = time.monotonic() - started
    assert 0.3 <= took < 1.5
    assert str(caught.value) == f"waited 0.3 s for the run to end; last seen: {last!r}"


async def test_a_check_still_running_at_the_deadline_is_cut_short() -> None:
    cancelled = asyncio.Event()

    async def hangs() -> bool:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    started = time.monotonic()
    with pytest.raises(AssertionError, match=re.escape("last seen: nothing (no check")):
        await until(hangs, timeout=0.2, what="a hanging check")
    assert time.monotonic() - started < 1.5
    assert cancelled.is_set()


async def test_ignored_errors_mean_not_yet_and_others_propagate() -> None:
    seen = answers(ConnectionError("restarting"), ConnectionError("still"), "back")

    def check() -> object:
        got = next(seen)
        if isinstance(got, BaseException):
            raise got
        return got

    assert await until(check, timeout=5, every=0.001, what="x", ignoring=(OSError,)) == "back"
    down = answers(ConnectionError("down for good"))
    with pytest.raises(AssertionError, match=re.escape("ConnectionError('down for good')")):
        await until(lambda: check_raising(down), timeout=0.2, what="x", ignoring=(OSError,))
    with pytest.raises(ValueError, match="broken"):
        await until(lambda: check_raising(answers(ValueError("broken"))), timeout=5, what="x")


def check_raising(seen: Iterator[object]) -> object:
    got = next(seen)
    if isinstance(got, BaseException):
        raise got
    return got


async def test_the_check_s_own_timeout_is_not_taken_for_the_wait_s() -> None:
    async def times_out() -> bool:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)
        return True

    with pytest.raises(TimeoutError):
        await until(times_out, timeout=30, what="x")


def test_the_sync_form_returns_the_first_truthy_answer() -> None:
    seen = answers(None, "", "ready")
    assert until_sync(lambda: next(seen), timeout=5, every=0.001, what="ready") == "ready"


def test_the_sync_form_honours_its_timeout_and_says_what_it_waited_for() -> None:
    seen = answers(ConnectionError("refused"), None)
    started = time.monotonic()
    with pytest.raises(AssertionError) as caught:
        until_sync(
            lambda: check_raising(seen),
            timeout=0.3,
            every=0.01,
            what="up.json",
            ignoring=(OSError,),
        )
    assert 0.3 <= time.monotonic() - started < 1.5
    assert str(caught.value) == "waited 0.3 s for up.json; last seen: None"
    with pytest.raises(AssertionError, match=re.escape("last seen: ConnectionError('refused')")):
        until_sync(
            lambda: check_raising(answers(ConnectionError("refused"))),
            timeout=0.1,
            what="up.json",
            ignoring=(OSError,),
        )


async def test_done_picks_the_answer_and_a_failure_shows_the_whole_last_state() -> None:
    states = answers({"status": "queued"}, {"status": "running", "steps": 2}, {"status": "done"})

    async def run() -> object:
        return next(states)

    got = await until(run, timeout=5, every=0.001, what="x", done=lambda r: r == {"status": "done"})
    assert got == {"status": "done"}
    stuck = answers({"status": "running", "steps": 2})
    with pytest.raises(AssertionError, match=re.escape("{'status': 'running', 'steps': 2}")):
        until_sync(lambda: next(stuck), timeout=0.1, what="x", done=lambda r: r == "done")


async def test_a_long_last_answer_is_cut_in_the_message() -> None:
    with pytest.raises(AssertionError) as caught:
        until_sync(lambda: "a" * 2000 + "z" * 3000, timeout=0.05, what="x", done=lambda _: False)
    assert caught.value.args[0].endswith(f"'{'a' * 399} … (4202 characters) … {'z' * 399}'")
