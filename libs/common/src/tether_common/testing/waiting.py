"""`until`: the one way a test (or a benchmark) waits for something no event announces.

Another process's state (a row, a file, a page, a replica's cache) is polled: the check
runs, and runs again every `every` seconds, until it answers something truthy, which is
returned. After `timeout` seconds without one the wait fails with an `AssertionError`
naming what was awaited (`what`) and the last answer seen, so a failing test says what
it waited for and how far it got. A check still running at the deadline is cancelled (the
async form): the timeout is a bound, not a hint.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

# A check answers the awaited thing, or something falsy (None, False, 0, []) for "not yet".
Check = Callable[[], Awaitable[T | None] | T | None]
Ignored = tuple[type[BaseException], ...]

_NOTHING = "nothing (no check finished)"
_SHOWN = 800  # characters of the last answer a failure shows


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    what: str,
    every: float = ...,
    ignoring: Ignored = ...,
    done: Callable[[T], object] = ...,
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    every: float = ...,
    ignoring: Ignored = ...,
    done: Callable[[T], object] = ...,
) -> T: ...


async def until(
    check: Check[T],
    *,
    timeout: float,
    what: str,
    every: float = 0.05,
    ignoring: Ignored = (),
    done: Callable[[Any], object] = bool,
) -> T:
    """The first answer of `check` (sync or async) that is `done` (truthy, unless told
    otherwise: `done` lets the check answer the whole state, which a failure then shows);
    an exception of a type in `ignoring` (a service still restarting) means "not yet"."""
    last: list[object] = []  # the last answer seen, for the failure's message
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            while True:
                answered, got = await _answer(check, ignoring, last)
                if answered and done(got):
                    return got  # type: ignore[return-value]  # `done` says it is the one
                await asyncio.sleep(every)
    except TimeoutError:
        if not scope.expired():
            raise  # the check's own timeout, not the wait's
        raise _timed_out(what, timeout, last) from None


async def _answer(check: Check[T], ignoring: Ignored, last: list[object]) -> tuple[bool, object]:
    """Whether `check` answered (an ignored error is no answer), and what."""
    try:
        got = check()
        if inspect.isawaitable(got):
            got = await got
    except ignoring as exc:
        last[:] = [exc]
        return False, None
    last[:] = [got]
    return True, got


@overload
def until_sync(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    every: float = ...,
    ignoring: Ignored = ...,
    done: Callable[[T], object] = ...,
) -> T: ...


@overload
def until_sync(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    every: float = ...,
    ignoring: Ignored = ...,
    done: Callable[[T], object] = ...,
) -> T: ...


def until_sync(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    every: float = 0.05,
    ignoring: Ignored = (),
    done: Callable[[Any], object] = bool,
) -> T:
    """`until` for synchronous tests: blocks, polling `check` (which cannot be cut short:
    the deadline is checked between its runs)."""
    deadline = time.monotonic() + timeout
    last: list[object] = []
    while True:
        try:
            got = check()
        except ignoring as exc:
            last[:] = [exc]
        else:
            last[:] = [got]
            if done(got):
                return got  # type: ignore[return-value]  # `done` says it is the one
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(what, timeout, last)
        time.sleep(min(every, left))


def _timed_out(what: str, timeout: float, seen: list[object]) -> AssertionError:
    last = _shown(seen[-1]) if seen else _NOTHING
    return AssertionError(f"waited {timeout:g} s for {what}; last seen: {last}")


def _shown(value: object) -> str:
    """`repr(value)`, its middle cut when long (the end of a log is as telling as its start)."""
    text = repr(value)
    if len(text) <= _SHOWN:
        return text
    half = _SHOWN // 2
    return f"{text[:half]} … ({len(text) - 2 * half} characters) … {text[-half:]}"
