"""Background loops: a failure repeating every tick is logged once with its traceback and
once when it ends, not once a tick; the loop outlives its failures."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tether_common.background import FailureLog, every

log = logging.getLogger("tests.background")


async def test_a_repeating_failure_is_logged_once_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0
    done = asyncio.Event()

    async def body() -> None:
        nonlocal calls
        calls += 1
        if calls <= 50:
            raise ConnectionRefusedError("the database is down")
        if calls == 53:
            done.set()

    caplog.set_level(logging.INFO, logger=log.name)
    task = asyncio.create_task(every(0, body, FailureLog(log, "the sweep", quiet_s=3600)))
    await asyncio.wait_for(done.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    records = [r for r in caplog.records if r.name == log.name]
    assert [r.levelno for r in records] == [logging.ERROR, logging.WARNING]
    assert records[0].exc_info is not None
    assert "the sweep failed" in records[0].getMessage()
    assert "works again after 50 failures" in records[1].getMessage()


def test_a_long_outage_says_so_now_and_then(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    failures = FailureLog(log, "the collector", quiet_s=0)
    for _ in range(3):
        failures.failed(OSError("gone"))
    messages = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert messages[0] == "the collector failed; retrying"
    assert messages[1:] == [
        "the collector still failing (2 times in 0 s): gone",
        "the collector still failing (3 times in 0 s): gone",
    ]
