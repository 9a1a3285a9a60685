"""Child processes that die with the process that started them, however it dies.

Every helper a Tether process starts (the services under `tether up`, nats-server and
PostgreSQL, sandboxes, MCP servers, query and file workers, the local model server) is
tied to its starter here, so a starter killed with SIGKILL leaves nothing running. The
kernel does the work: `PR_SET_PDEATHSIG` asks for SIGKILL when the parent ends, set in
the child itself, after any change of user (which clears it) and before `exec` (which
keeps it). A child that arms it checks that its parent is still the one that started
it, so a parent gone a moment earlier is not missed.

The kernel's "parent" is the *thread* that forked the child: the signal comes when that
thread ends. So a child is forked on a thread that lives as long as the process: the
event loop's (asyncio spawns happen there), a thread blocked until the child ends
(`subprocess.run`), the main thread, or this module's own (`popen`, for any other
caller).

The ways in, all arming the same signal:
- `preexec(then)`: the `preexec_fn` of a spawn that forks anyway (the sandbox, the
  supervisor, the embedded servers). CPython uses vfork without one; with one it forks
  the whole process (about 15 ms for a service's size), so hot spawns of our own Python
  programs use `arm` instead.
- `arm(parent)`: first thing in a Python child of ours, given its starter's pid in its
  arguments (the output-store's query workers): no `preexec_fn`, so the spawn stays a
  vfork.
- `command(argv)`: a program started by code that takes no `preexec_fn` (the MCP SDK's
  stdio client): `python -m tether_common.lifeline PID PROGRAM ARGS...` arms, then execs.
- `watch(starter)`: a grandchild forked by a helper we do not run (a worker of
  multiprocessing's fork server, whose parent is the fork server): a thread that waits
  on the starter's pidfd and kills the process when the starter ends. The fork server
  and the resource tracker then end by themselves: each exits when the last process
  holding its pipe has gone.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
# The exit code of a child whose parent had already gone when it armed itself.
ORPHANED = 70
# How often a watcher without pidfds (Linux before 5.3, or a filter refusing them)
# looks whether its starter is still there.
POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What `/proc/<pid>/stat` says of a process that this module reads."""

    parent: int
    state: str  # "Z": ended, not yet reaped by its parent
    started: int  # clock ticks after boot


def proc_stat(pid: int) -> ProcStat | None:
    """`pid`'s entry, or None when there is no such process (or it is hidden)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(parent=int(fields[1]), state=fields[0].decode(), started=int(fields[19]))


def started_at(pid: int) -> int | None:
    """When `pid` started, or None when there is no such process."""
    found = proc_stat(pid)
    return None if found is None else found.started


@dataclass(frozen=True, slots=True)
class Starter:
    """A process, named so that another one given the same pid later cannot pass for it."""

    pid: int
    started: int  # clock ticks after boot (`/proc/<pid>/stat`, field 22)

    def running(self) -> bool:
        """Still this process, and not ended (a zombie has ended)."""
        found = proc_stat(self.pid)
        return found is not None and found.started == self.started and found.state != "Z"


def this_process() -> Starter:
    pid = os.getpid()
    started = started_at(pid)
    assert started is not None, "/proc is not mounted"
    return Starter(pid, started)


@functools.cache
def _prctl() -> Any:
    return ctypes.CDLL(None, use_errno=True).prctl


def arm(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent ends; end now if `parent`
    (the pid that started it) is not its parent any more."""
    if _prctl()(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_PDEATHSIG): {os.strerror(code)}")
    if os.getppid() != parent:
        os._exit(ORPHANED)


def preexec(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A `preexec_fn` that runs `then` (a user change, limits), then arms the child.
    Built in the parent: the child, between fork and exec, imports and looks up nothing."""
    parent = os.getpid()
    _prctl()  # looked up now, never in the child

    def run() -> None:
        if then is not None:
            then()
        arm(parent)

    return run


def popen(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **kwargs)` with the child armed, safe from any calling
    thread: forked on the main thread or one that declared `fork_here`, else on this
    module's own thread, which lives as long as the process (a pool thread that ended
    would take the child with it). A `preexec_fn` runs first."""
    setup = preexec(kwargs.pop("preexec_fn", None))

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(args), preexec_fn=setup, **kwargs)

    if threading.current_thread() is threading.main_thread() or getattr(_here, "lives", False):
        return spawn()
    return _forker(os.getpid()).submit(spawn).result()


_here = threading.local()


def fork_here() -> None:
    """Declare that the calling thread lives as long as the children it starts: `popen`
    then forks on it, so they keep what this thread alone has (a network namespace
    entered with setns), instead of on this module's own thread."""
    _here.lives = True


@functools.cache
def _forker(pid: int) -> ThreadPoolExecutor:
    # Keyed by pid: a process forked from this one has its own (the thread is not copied).
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="lifeline")


def command(argv: Sequence[str], *, path: str | None = None) -> list[str]:
    """The command that runs `argv` armed: this interpreter arms itself, then execs the
    program (found on `path` now, so a missing one fails here as it would have)."""
    program = shutil.which(argv[0], path=path)
    if program is None:
        raise FileNotFoundError(errno.ENOENT, "no such program (or not executable)", argv[0])
    # -I: the child's environment (PYTHONPATH and the like) is the program's, not ours.
    return [sys.executable, "-I", "-m", __name__, str(os.getpid()), program, *argv[1:]]


def watch(starter: Starter) -> None:
    """Kill this process as soon as `starter` ends, from a thread of its own; at once if
    it has already ended (or its pid now names another process)."""
    try:
        pidfd: int | None = os.pidfd_open(starter.pid)
    except ProcessLookupError:
        _die()
    except OSError:  # no pidfds here: look every POLL_S instead
        pidfd = None
    # Checked after the pidfd is open: it names the starter, or the starter was gone.
    if not starter.running():
        _die()
    args = (starter, pidfd)
    threading.Thread(target=_kill_after, args=args, name="lifeline", daemon=True).start()


def _kill_after(starter: Starter, pidfd: int | None) -> None:
    wait_gone(starter, pidfd)
    _die()


def wait_gone(starter: Starter, pidfd: int | None) -> None:
    """Return once `starter` has ended: its pidfd becomes readable, or without one, /proc
    no longer shows it running."""
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass
        return
    while starter.running():
        time.sleep(POLL_S)


def _die() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL cannot be caught")


def main(argv: Sequence[str]) -> NoReturn:
    """`python -m tether_common.lifeline PARENT PROGRAM [ARGS...]`: arm, then become
    PROGRAM (stdin, stdout and the environment pass through untouched)."""
    parent, program, *args = argv
    arm(int(parent))
    os.execv(program, [program, *args])


__all__ = [
    "ORPHANED",
    "ProcStat",
    "Starter",
    "arm",
    "command",
    "fork_here",
    "main",
    "popen",
    "preexec",
    "proc_stat",
    "started_at",
    "this_process",
    "wait_gone",
    "watch",
]


if __name__ == "__main__":
    main(sys.argv[1:])
