"""Process trees read from /proc, for the tests that kill a process and look for what it
left running: each process is named by pid *and* start time (`lifeline.Starter`), so a
pid the kernel has given to a new process meanwhile is never mistaken for a survivor."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from tether_common.lifeline import Starter, proc_stat
from tether_common.testing import until_sync


@dataclass(frozen=True, slots=True)
class Proc:
    process: Starter
    command: str

    def alive(self) -> bool:
        return self.process.running()


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def proc(pid: int) -> Proc:
    found = proc_stat(pid)
    assert found is not None, f"no process {pid}"
    return Proc(Starter(pid, found.started), _command(pid))


def descendants(pid: int) -> list[Proc]:
    """Every running process below `pid` (children, theirs, ...), as it is now."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        found = proc_stat(int(name)) if name.isdigit() else None
        if found is not None and found.state != "Z":
            children.setdefault(found.parent, []).append(int(name))
    below: list[Proc] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found = proc_stat(child)
        if found is not None:
            below.append(Proc(Starter(child, found.started), _command(child)))
        todo += children.get(child, [])
    return below


def survivors(procs: list[Proc], within_s: float = 5.0) -> list[Proc]:
    """Those of `procs` still running after `within_s` (polled; returns as soon as none
    is left)."""
    try:
        return until_sync(
            lambda: [p for p in procs if p.alive()],
            timeout=within_s,
            what="every process ending",
            done=lambda left: not left,
        )
    except AssertionError:
        return [p for p in procs if p.alive()]


def kill_all(procs: list[Proc]) -> None:
    """SIGKILL whichever of `procs` still run (a test's clean-up after a leak)."""
    for leftover in procs:
        if leftover.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover.process.pid, signal.SIGKILL)
