"""The event-loop lag monitor every service runs (tether_common.looplag, started by
`Service.start`): a bus handler that blocks the loop is reported as a stall, with how the
loop's thread spent it, and kept as the service's worst lag; while it blocks, the watchdog
names the blocking line."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from tether_common.bus import Bus
from tether_common.looplag import ENDED, TICK_S, LoopLag, Threads, busy_threads
from tether_common.messages.base import WireModel
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_common.subjects import Route

WAIT_S = 60.0  # generous: the CI machine is slow
BLOCK_S = 0.8
# The stall is at least the block less the tick it fell into.
SHORTEST_STALL_S = BLOCK_S - TICK_S


class Ask(WireModel):
    n: int


class Answer(WireModel):
    n: int


class StallsSeen(logging.Handler):
    """The monitor's warnings; `long` is set by one for a stall as long as the block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.long = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if getattr(record, "lag_s", 0.0) >= SHORTEST_STALL_S:
            self.long.set()


@pytest.fixture
def stalls() -> Iterator[StallsSeen]:
    seen = StallsSeen()
    logger = logging.getLogger("tether_common.looplag")
    logger.addHandler(seen)
    try:
        yield seen
    finally:
        logger.removeHandler(seen)


async def test_a_handler_that_blocks_the_loop_is_reported(
    nats_url: str, prefix: str, bus: Bus, stalls: StallsSeen
) -> None:
    service = Service(
        "loop-lag-test",
        CommonSettings(nats_url=nats_url, subject_prefix=prefix, loop_lag_warn_s=0.25),
        uses_db=False,
    )
    route = Route(f"{prefix}.test.block", Ask, Answer, "loop_lag_test")

    async def block(ask: Ask) -> Answer:
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the blocking call under test
        return Answer(n=ask.n)

    await service.start()
    try:
        await service.bus.serve(route, block)
        assert (await bus.request(route, Ask(n=1), timeout=WAIT_S)).n == 1
        async with asyncio.timeout(WAIT_S):
            await stalls.long.wait()
        stall = next(r for r in stalls.records if getattr(r, "lag_s", 0.0) >= SHORTEST_STALL_S)
        # A sleep: the loop's thread was neither running nor waiting for a CPU.
        assert getattr(stall, "off_cpu_s", 0.0) >= SHORTEST_STALL_S
        assert "event loop stalled" in stall.getMessage()
        assert service.loop_lag.worst_s >= SHORTEST_STALL_S
        assert service.loop_lag.stalls >= 1
        # Caught while it lasted: the loop's thread was in the handler's sleep.
        [caught] = [r for r in stalls.records if hasattr(r, "stuck_s")]
        assert "in block: time.sleep(BLOCK_S)" in caught.getMessage()
        assert "test_loop_lag.py:" in getattr(caught, "at", "")
    finally:
        await service.stop()


def _gil_hog_size(seconds: float) -> int:
    """How long a `sum(range(n))` must be to keep the GIL about `seconds` (one C call:
    it never checks whether another thread asked for the GIL)."""
    n = 2_000_000
    while True:
        began = time.thread_time()
        sum(range(n))
        took = time.thread_time() - began
        if took >= 0.05:
            return int(n * seconds / took)
        n *= 4


@pytest.mark.parametrize("lingers", [True, False], ids=["a live thread", "an ended thread"])
async def test_a_thread_that_keeps_the_gil_is_named(stalls: StallsSeen, lingers: bool) -> None:
    """The loop's thread waits for the GIL, off CPU, while another thread runs one long C
    call: the watchdog cannot run either, so only the warning after it can say who it
    was, by the threads' CPU time over the stall: by name while the thread lives (a pool
    worker); one gone by the next tick is still counted."""
    monitor = LoopLag("gil-test", warn_s=0.25)
    size = _gil_hog_size(2 * BLOCK_S)  # well past the shortest stall, whatever the clock does
    done = threading.Event()

    def hog() -> None:
        sum(range(size))
        if lingers:
            done.wait(WAIT_S)

    monitor.start()
    try:
        await asyncio.sleep(TICK_S * 2)
        thread = threading.Thread(target=hog, name="gil hog")
        thread.start()
        async with asyncio.timeout(WAIT_S):
            await stalls.long.wait()
        done.set()
        await asyncio.to_thread(thread.join)
    finally:
        await monitor.stop()
    stall = next(r for r in stalls.records if getattr(r, "lag_s", 0.0) >= SHORTEST_STALL_S)
    others: dict[str, float] = getattr(stall, "other_threads", {})
    if lingers:
        assert others.get("gil hog", 0.0) >= SHORTEST_STALL_S / 2, stall.getMessage()
        assert "gil hog" in stall.getMessage()
    else:  # by name, as a nameless thread id, or as ended: whenever the tick read it
        assert sum(others.values()) >= SHORTEST_STALL_S / 2, stall.getMessage()


def test_cpu_of_threads_that_ended_is_counted_apart() -> None:
    """The process's CPU beyond what its live threads account for ran in threads that
    ended between the two snapshots."""
    me = threading.get_native_id()
    before = Threads(process_s=10.0, cpu_s={me: 5.0, 1: 1.0, 2: 2.0})
    after = Threads(process_s=12.0, cpu_s={me: 5.01, 1: 1.7, 3: 0.02})  # 2 ended; 3 is new
    assert busy_threads(before, after, me) == {"thread 1": 0.7, ENDED: 1.27}
    quiet = Threads(process_s=10.03, cpu_s={me: 5.01, 1: 1.0, 2: 2.01})
    assert busy_threads(before, quiet, me) == {}


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG], ids=["info", "debug"])
async def test_a_stuck_loop_is_one_line_and_its_stack_only_at_debug(
    level: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29, item 2: a stall while a service starts (imports, migrations) is one
    warning line naming where the loop is; the stack is logged only at debug level."""
    caplog.set_level(level, logger="tether_common.looplag")
    monitor = LoopLag("start-up", warn_s=0.2, tick_s=0.05)
    monitor.start()
    try:
        await asyncio.sleep(0.2)  # a few ticks first
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the stall under test
        await asyncio.sleep(0.2)
    finally:
        await monitor.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    [stuck] = [r for r in warnings if hasattr(r, "stuck_s")]
    assert "test_a_stuck_loop_is_one_line_and_its_stack_only_at_debug: time.sleep(" in (
        stuck.getMessage()
    )
    for record in warnings:
        assert "\n" not in record.getMessage(), record.getMessage()
        assert "stack" not in vars(record)
    stacks = [r for r in caplog.records if 'File "' in r.getMessage()]
    if level == logging.DEBUG:
        [stack] = stacks
        assert stack.levelno == logging.DEBUG
        assert "time.sleep(BLOCK_S)" in stack.getMessage()
    else:
        assert stacks == []
