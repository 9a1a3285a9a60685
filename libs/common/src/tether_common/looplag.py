"""The event-loop lag monitor every service runs (`Service` starts and stops it): a task
that sleeps a short tick and measures how late it wakes.

A late wake means the loop ran nothing else meanwhile: a callback that kept it busy (CPU
work, a blocking call) or a process the machine did not schedule. Each stall of at least
`loop_lag_warn_s` is logged with how the loop's thread spent it, from the kernel's count
(`/proc/thread-self/schedstat`): running on a CPU (the loop was busy), runnable but waiting
for one (the machine was busy), or neither (blocked in a system call, waiting for the GIL
held by another thread, stopped, or asleep in the loop's own wait). Every tick's lag goes to
the `tether.loop.lag` histogram; the worst one is kept and said again when the monitor stops.

A stall is also caught while it lasts: a watchdog thread that sees no tick for `warn_s`
logs where the loop's thread is at that moment, once per stall: one line naming the
innermost frame (file, line, function, source) as a warning, and its Python stack at
debug level. That names the blocking call the after-the-fact warning cannot. (Python code hands the GIL over
every few milliseconds, so a busy loop is caught too; one C call that keeps the GIL all
along is not, and shows only in the warning after it.)

The warning also names the process's other threads that ran during the stall: a loop
thread off CPU while another ran is the GIL held by that one (a long C call that never
lets it go), which the watchdog cannot catch since it needs the GIL too.

Cheap: per tick one timer wake, a read of procfs per thread (a service has a handful) and
one histogram record; the watchdog wakes four times a tick and reads one float.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from contextlib import suppress
from dataclasses import dataclass, field

from tether_common.metrics import loop_lag

log = logging.getLogger(__name__)

# A stall is seen within a tick of its length (one that starts late in a tick shows that much
# shorter); five wakes a second cost about 0.15% of a core (a bare timer wake is ~0.1 ms of
# CPU on a loaded virtual machine, each thread's CPU from procfs ~0.1 ms, the histogram less).
TICK_S = 0.2
SCHEDSTAT = "/proc/thread-self/schedstat"
STACK_FRAMES = 12  # the innermost frames the watchdog logs


@dataclass(frozen=True, slots=True)
class ThreadTimes:
    """What a thread has spent so far, in seconds."""

    on_cpu_s: float
    waiting_s: float | None  # runnable with no CPU; None where the kernel does not say


class ThreadClock:
    """The times of the thread that opened it (the event loop's): from the kernel's
    scheduler statistics where Linux has them, else its CPU time alone."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open(SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> ThreadTimes:
        if self._fd is not None:
            try:
                on_cpu_ns, waiting_ns, _slices = os.pread(self._fd, 128, 0).split()
                return ThreadTimes(int(on_cpu_ns) / 1e9, int(waiting_ns) / 1e9)
            except (OSError, ValueError):
                self.close()  # never again: CPU time alone from here on
        return ThreadTimes(time.thread_time(), None)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


TASKS = "/proc/self/task"
BUSY_THREAD_S = 0.05  # another thread named in a stall's warning ran at least this long


@dataclass(frozen=True, slots=True)
class Threads:
    """The process's CPU time so far and each live thread's, in seconds (threads by
    native id; empty where procfs does not say). A stall whose loop thread was off CPU
    while another thread ran was the GIL held by that one (a long C call that never lets
    it go)."""

    process_s: float  # every thread's, those that have ended included
    cpu_s: dict[int, float]


ENDED = "threads that ended"


def thread_cpu() -> Threads:
    """A snapshot of the process's threads' CPU time."""
    found: dict[int, float] = {}
    process_s = time.process_time()
    with suppress(OSError):
        for tid in os.listdir(TASKS):
            try:  # os-level calls: half the cost of a Python file object, 5 times a second
                fd = os.open(f"{TASKS}/{tid}/schedstat", os.O_RDONLY)
                try:
                    found[int(tid)] = int(os.read(fd, 128).split()[0]) / 1e9
                finally:
                    os.close(fd)
            except (OSError, ValueError, IndexError):
                continue  # the thread ended meanwhile
    return Threads(process_s, found)


def busy_threads(before: Threads, after: Threads, skip: int) -> dict[str, float]:
    """The threads other than `skip` that ran at least `BUSY_THREAD_S` between two
    snapshots, by name (Python's where it has one), the busiest first; CPU the process
    spent beyond its live threads' (threads that ran and ended in between: a pool worker
    retired, a thread started for one job) is given as `ENDED`."""
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    ran = {tid: cpu_s - before.cpu_s.get(tid, 0.0) for tid, cpu_s in after.cpu_s.items()}
    busy = {
        names.get(tid, f"thread {tid}"): round(cpu_s, 3)
        for tid, cpu_s in sorted(ran.items(), key=lambda item: -item[1])
        if tid != skip and cpu_s >= BUSY_THREAD_S
    }
    if after.cpu_s:  # procfs said: what it does not account for ran in ended threads
        ended = (after.process_s - before.process_s) - sum(ran.values())
        if ended >= BUSY_THREAD_S:
            busy[ENDED] = round(ended, 3)
    return busy


@dataclass(frozen=True, slots=True)
class Stall:
    """One late wake: the loop's thread over the whole interval (the tick and the lag)."""

    lag_s: float
    interval_s: float
    on_cpu_s: float
    waiting_s: float | None
    others: dict[str, float] = field(default_factory=dict)  # other threads that ran meanwhile

    @property
    def off_cpu_s(self) -> float:
        """Neither running nor runnable: blocked, stopped or asleep."""
        return max(0.0, self.interval_s - self.on_cpu_s - (self.waiting_s or 0.0))


def stall_between(
    before: ThreadTimes,
    after: ThreadTimes,
    lag_s: float,
    interval_s: float,
    others: dict[str, float] | None = None,
) -> Stall:
    waiting = (
        None
        if before.waiting_s is None or after.waiting_s is None
        else after.waiting_s - before.waiting_s
    )
    return Stall(lag_s, interval_s, after.on_cpu_s - before.on_cpu_s, waiting, others or {})


class LoopLag:
    """The monitor of one service's event loop; `run` until cancelled."""

    def __init__(self, service: str, warn_s: float, *, tick_s: float = TICK_S) -> None:
        self.service = service
        self.warn_s = warn_s
        self.tick_s = tick_s
        self.worst_s = 0.0
        self.stalls = 0  # wakes at least `warn_s` late
        self._attributes = {"service": service}
        self._task: asyncio.Task[None] | None = None
        self._beat = time.monotonic()  # the loop's last tick, read by the watchdog
        self._watchdog: Watchdog | None = None

    def start(self) -> None:
        """Start watching the running loop (in a task this monitor owns, and a watchdog
        thread), once."""
        if self._task is None:
            self._beat = time.monotonic()
            self._watchdog = Watchdog(self, threading.get_ident())
            self._watchdog.start()
            self._task = asyncio.create_task(self.run(), name=f"{self.service} event loop lag")

    async def stop(self) -> None:
        """Stop watching and wait until the task has ended (its summary said)."""
        task, self._task = self._task, None
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.stop()
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s event loop monitor failed", self.service, exc_info=error)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = ThreadClock()  # opened here, on the loop's thread
        me = threading.get_native_id()
        try:
            times, then, threads = clock.read(), loop.time(), thread_cpu()
            while True:
                await asyncio.sleep(self.tick_s)
                self._beat = time.monotonic()
                now, now_times, now_threads = loop.time(), clock.read(), thread_cpu()
                lag = max(0.0, now - then - self.tick_s)
                loop_lag.record(lag, self._attributes)
                if lag >= self.warn_s:
                    others = busy_threads(threads, now_threads, me)
                    self._stalled(stall_between(times, now_times, lag, now - then, others))
                times, then, threads = now_times, now, now_threads
        finally:
            clock.close()
            if self.stalls:
                log.info(
                    "%s event loop: stalls of %.2f s or more: %d, the worst %.2f s",
                    self.service,
                    self.warn_s,
                    self.stalls,
                    self.worst_s,
                )

    def _stalled(self, stall: Stall) -> None:
        self.stalls += 1
        self.worst_s = max(self.worst_s, stall.lag_s)
        waited = "?" if stall.waiting_s is None else f"{stall.waiting_s:.2f}"
        others = ", ".join(f"{name} {cpu_s:.2f} s" for name, cpu_s in stall.others.items())
        log.warning(
            "event loop stalled %.2f s (worst %.2f s): over %.2f s its thread ran %.2f s, "
            "waited %s s for a CPU, was off CPU %.2f s; other threads on CPU: %s",
            stall.lag_s,
            self.worst_s,
            stall.interval_s,
            stall.on_cpu_s,
            waited,
            stall.off_cpu_s,
            others or "none",
            extra={
                "lag_s": round(stall.lag_s, 3),
                "on_cpu_s": round(stall.on_cpu_s, 3),
                "waiting_s": None if stall.waiting_s is None else round(stall.waiting_s, 3),
                "off_cpu_s": round(stall.off_cpu_s, 3),
                "other_threads": stall.others,
            },
        )


class Watchdog(threading.Thread):
    """Watches a monitor's ticks from outside the loop: when none has come for the tick
    plus `warn_s`, logs the loop thread's stack as it is now, once per stall."""

    def __init__(self, monitor: LoopLag, loop_thread: int) -> None:
        super().__init__(name=f"{monitor.service} event loop watchdog", daemon=True)
        self.monitor = monitor
        self.loop_thread = loop_thread
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive() and threading.get_ident() != self.ident:
            self.join(timeout=1.0)

    def run(self) -> None:
        monitor = self.monitor
        caught = 0.0  # the beat of the stall already reported
        while not self._stopped.wait(monitor.tick_s / 4):
            beat = monitor._beat
            stuck = time.monotonic() - beat - monitor.tick_s
            if stuck >= monitor.warn_s and beat != caught:
                caught = beat
                self._report(stuck)

    def _report(self, stuck_s: float) -> None:
        """One line where the loop's thread is (a service's start stalls on imports and
        migrations: its log stays readable); the stack only when debug is asked for."""
        frame = sys._current_frames().get(self.loop_thread)
        if frame is None:
            return
        stack = traceback.extract_stack(frame)[-STACK_FRAMES:]
        at = where(stack[-1])
        log.warning(
            "event loop stuck for %.2f s so far, at %s",
            stuck_s,
            at,
            extra={"stuck_s": round(stuck_s, 3), "at": at},
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "the stuck event loop's thread (innermost last):\n%s",
                "".join(traceback.format_list(stack)).rstrip(),
            )


def where(frame: traceback.FrameSummary) -> str:
    """A frame as one line: its file's last two path parts, line, function and source."""
    path = "/".join(frame.filename.replace("\\", "/").rsplit("/", 2)[-2:])
    source = f": {frame.line.strip()}" if frame.line else ""
    return f"{path}:{frame.lineno} in {frame.name}{source}"


__all__ = [
    "ENDED",
    "TICK_S",
    "LoopLag",
    "Stall",
    "ThreadClock",
    "ThreadTimes",
    "Threads",
    "Watchdog",
    "busy_threads",
    "thread_cpu",
    "where",
]
