"""Where the CPU goes during a measurement: cores used by each service, nats-server and
PostgreSQL (its postmaster and every backend), from their CPU times before and after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

from bench.stack import Stack


def processes(stack: Stack) -> dict[str, list[psutil.Process]]:
    found: dict[str, list[psutil.Process]] = {}
    for child in stack.supervisor.children:
        if child.proc is not None and child.proc.returncode is None:
            found.setdefault(child.spec.name, []).append(psutil.Process(child.proc.pid))
    found["bench client"] = [psutil.Process()]
    for name, pid in stack.server_pids.items():
        if pid:
            top = psutil.Process(pid)
            found[name] = [top, *top.children(recursive=True)]
    return found


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    """CPU seconds so far, by pid (a process gone meanwhile is left out)."""
    found = {}
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        found[proc.pid] = float(times.user + times.system)
    return found


@dataclass
class Cores:
    text: str = ""
    used: dict[str, float] = field(default_factory=dict)  # cores, by process group
    wall: float = 0.0

    def ms_per(self, count: int) -> dict[str, float]:
        """CPU milliseconds per one of `count` things done (e.g. steps), by process group."""
        return {name: cores * self.wall * 1000 / count for name, cores in self.used.items()}

    def per(self, count: int, unit: str) -> str:
        """CPU milliseconds per `unit` (e.g. per step), by process group."""
        parts = "  ".join(
            f"{name} {ms:.2f}"
            for name, ms in sorted(self.ms_per(count).items(), key=lambda i: -i[1])
            if ms >= 0.01
        )
        return f"  CPU ms per {unit}: {parts}"


@contextmanager
def cpu_report(stack: Stack, label: str) -> Iterator[Cores]:
    """Cores used per process group over the `with` block, as one line of text."""
    cores = Cores()
    before: dict[int, float] = {}
    for procs in processes(stack).values():
        before |= cpu_seconds(procs)
    psutil.cpu_percent()  # starts the machine-wide count
    started = time.perf_counter()
    yield cores
    wall = time.perf_counter() - started
    after = processes(stack)  # PostgreSQL backends come and go: count per pid
    used = {
        name: sum(t - before.get(pid, 0.0) for pid, t in cpu_seconds(procs).items()) / wall
        for name, procs in after.items()
    }
    parts = "  ".join(f"{n} {c:.2f}" for n, c in sorted(used.items(), key=lambda i: -i[1]))
    busy = psutil.cpu_percent() / 100 * (psutil.cpu_count() or 1)
    ours = sum(used.values())
    cores.used, cores.wall = used, wall
    cores.text = (
        f"  cores used ({label}; {psutil.cpu_count()} in all, {busy:.2f} busy, "
        f"{max(0.0, busy - ours):.2f} by other work): {parts}"
    )
