"""Ctrl-C for the commands that follow a run: it always ends the follow.

`asyncio.run` turns SIGINT into one cancellation of the main task. A library that swallows
that cancellation (seen in CI while a follower was reconnecting to a brain that had gone
away: no "Stopped following", the reconnect loop went on for its whole minute) loses the
Ctrl-C. Here SIGINT cancels the followed task, again every second until it has ended, and
then raises KeyboardInterrupt (exit 130), whatever the task did with the cancellation."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

RECANCEL_S = 1.0


async def interruptible(work: Coroutine[Any, Any, T]) -> T:
    """`await work`, ended by Ctrl-C (raised as KeyboardInterrupt once it has ended)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    pressed = False

    def on_sigint() -> None:
        nonlocal pressed
        pressed = True
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread: as before
        return await task
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=RECANCEL_S)
            if pressed and not task.done():
                task.cancel()  # the last one was swallowed
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    if pressed:
        if not task.cancelled():
            task.exception()  # retrieved: whatever it ended with, Ctrl-C is the outcome
        raise KeyboardInterrupt
    return task.result()
