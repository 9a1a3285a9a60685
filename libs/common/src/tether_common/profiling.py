"""A service process profiled from start to stop (`TETHER_PROFILE_DIR`), and the report
that reads the profiles back: the top functions by own time and by cumulative time.

cProfile (stdlib) with its default clock: wall time, so an idle event loop shows as time
in `epoll.poll`, which the report counts apart as idle. (A CPU-time clock would need a
system call per function entry and exit: about 7x the profiled code's own cost, against
about 2x for the default.) Figures taken with profiling on are inflated accordingly; it
says where the time goes, not how much there is.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

# Where an asyncio service waits for work when it has none (the selector's wait).
IDLE_FUNCTIONS = frozenset({"<method 'poll' of 'select.epoll' objects>"})


def profile_path(folder: Path, service: str) -> Path:
    """One file per process: replicas of a service and restarts never overwrite."""
    return folder / f"{service}-{os.getpid()}.prof"


@contextmanager
def profiled(service: str, folder: Path | None) -> Iterator[None]:
    """Profile the `with` block when `folder` is given; the profile is written there on
    the way out, however the block ends (a SIGKILLed process writes none). SIGUSR1
    starts the profile afresh."""
    if folder is None:
        yield
        return
    profiler = cProfile.Profile()

    def write() -> None:
        profiler.disable()
        folder.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile_path(folder, service))

    def on_term(signum: int, _frame: FrameType | None) -> None:
        # uvicorn drains on SIGTERM, then restores this handler and raises the signal
        # again to die of it: write the profile first, then die of it all the same.
        write()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    def on_restart(_signum: int, _frame: FrameType | None) -> None:
        # SIGUSR1: forget what was profiled so far (the start-up), so a benchmark's
        # profile holds its measurement only.
        profiler.disable()
        profiler.clear()
        profiler.enable()

    previous = signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_restart)
    profiler.enable()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        write()


@dataclass(frozen=True, slots=True)
class Row:
    function: str  # file:line(name), with the path cut below site-packages or src
    calls: int
    own_s: float
    cumulative_s: float


def _where(file: str, line: int, name: str) -> str:
    if file == "~":  # a builtin: pstats spells it as the name alone
        return name
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{file}:{line}({name})"


def read_rows(paths: list[Path]) -> tuple[list[Row], float, float]:
    """Every function of the profiles in `paths` (summed: the replicas of one service),
    with the total time and the time idle in the event loop's wait."""
    stats = pstats.Stats(*(str(p) for p in paths), stream=io.StringIO())
    table = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    rows, idle = [], 0.0
    for (file, line, name), (_prim, calls, own, cumulative, _callers) in table.items():
        if name in IDLE_FUNCTIONS:
            idle += own
            continue
        rows.append(Row(_where(file, line, name), calls, own, cumulative))
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    return rows, total, idle


def report(service: str, paths: list[Path], top: int = 15) -> str:
    """The `top` functions by own time, then by cumulative time, as text."""
    rows, total, idle = read_rows(paths)
    busy = max(total - idle, 1e-9)
    lines = [
        f"-- profile of {service} ({len(paths)} process(es)): {busy:.2f} s busy, "
        f"{idle:.2f} s idle in the event loop; % of busy time --"
    ]
    for title, key in (("own time", "own_s"), ("cumulative", "cumulative_s")):
        lines.append(f"  top {top} by {title}:    calls    own s    cum s   %")
        ranked = sorted(rows, key=lambda r: getattr(r, key), reverse=True)[:top]
        lines += [
            f"  {r.calls:>10} {r.own_s:8.3f} {r.cumulative_s:8.3f} "
            f"{100 * getattr(r, key) / busy:5.1f}  {r.function}"
            for r in ranked
        ]
    return "\n".join(lines)


__all__ = ["IDLE_FUNCTIONS", "Row", "profile_path", "profiled", "read_rows", "report"]
