"""Ctrl-C ends a follow even when something under it swallowed the cancellation that
`asyncio.run` makes of SIGINT (seen in CI: a follower reconnecting to a brain that had gone
away never said "Stopped following" and ran on for its whole reconnect window)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tether_client.interrupts import interruptible


async def swallower(started: asyncio.Event, seen: list[str]) -> str:
    started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        seen.append("swallowed")  # a library that loses the cancellation
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        seen.append("cancelled again")
        raise
    return "ran on"


async def press_ctrl_c(started: asyncio.Event) -> None:
    await started.wait()
    os.kill(os.getpid(), signal.SIGINT)


async def test_ctrl_c_ends_a_follow_that_swallowed_its_cancellation() -> None:
    started, seen = asyncio.Event(), list[str]()
    presser = asyncio.create_task(press_ctrl_c(started))
    with pytest.raises(KeyboardInterrupt):
        await interruptible(swallower(started, seen))
    await presser
    assert seen == ["swallowed", "cancelled again"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def test_without_ctrl_c_the_result_comes_back() -> None:
    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    assert await interruptible(work()) == 7
