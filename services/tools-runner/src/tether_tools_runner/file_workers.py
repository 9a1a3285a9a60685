"""Where the file tools' I/O runs: as the sandbox user, never as root.

`setresuid` in Python changes every thread of the process, so a root runner cannot drop
privileges for one call. It keeps a small pool of worker processes instead, forked from
multiprocessing's fork server (a fresh interpreter with the operations imported, so no
lock or thread of the runner is inherited and a new worker starts in milliseconds); each
opens the workspace root and then drops to the sandbox user for good. A runner that is not root is
its own sandbox user and runs the same functions in a thread.

Nothing here outlives the runner, however it dies: each worker watches the runner and
ends with it (`tether_common.lifeline.watch`); the fork server and multiprocessing's
resource tracker then end by themselves, as each does once the last process holding its
pipe is gone. A worker that dies (or overruns a call that was then given up) is replaced
with the whole pool; the calls it held answer `worker_failed`, never hang. Functions
sent here are module-level, take plain arguments and answer `T | Failed`.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar

from tether_common import lifeline
from tether_tools_runner.sandbox.identity import SandboxUser
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.workspace import Failed, root_fd

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_WORKERS = 2
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


# Imported before the worker drops: afterwards the interpreter's own files may be out of
# the sandbox user's reach (a Python under /root), and the operations live here.
PRELOAD = (
    "tether_tools_runner.tools.files_read",
    "tether_tools_runner.tools.files_write",
    "tether_tools_runner.staging.ops",
)


def become(
    root: str, uid: int, gid: int, runner: lifeline.Starter, preload: tuple[str, ...] = PRELOAD
) -> None:
    """Worker initializer: die with `runner` (the worker's parent is the fork server, so
    only a watch on the runner itself can tell), import the operations and open the root
    while still root, then become the sandbox user (groups, gid, uid - each for real,
    effective and saved ids)."""
    lifeline.watch(runner)
    for module in preload:
        importlib.import_module(module)
    root_fd(root)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise SystemExit("file worker could not drop to the sandbox user")
    _not_dumpable()


def _not_dumpable() -> None:
    """Keep other processes of the sandbox user (a shell command under the `rlimits`
    level runs as the same uid) from ptracing this worker or opening its /proc fds: its
    pipes lead to the root runner, which unpickles what comes back."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit("file worker could not make itself non-dumpable")


def dumpable() -> int:
    """This process's dumpable flag (0 in a worker); sent to a worker to check it."""
    return int(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


class FileWorkers:
    """Runs file operations as `user`: in worker processes when that drops root."""

    def __init__(self, root: Path, user: SandboxUser, *, workers: int = DEFAULT_WORKERS) -> None:
        self.root = str(root)
        self.user = user
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    @property
    def isolated(self) -> bool:
        """True when calls run in worker processes as another user."""
        return self.user.drops

    async def run(self, fn: Callable[..., T | Failed], *args: Any) -> T:
        """`fn(*args)` as the sandbox user; a `Failed` answer is raised as `ToolFailure`."""
        if not self.isolated:
            result = await asyncio.to_thread(fn, *args)
        else:
            result = await self._in_worker(fn, *args)
        if isinstance(result, Failed):
            raise ToolFailure(result.code, result.message)
        return result

    async def _in_worker(self, fn: Callable[..., T | Failed], *args: Any) -> T | Failed:
        pool = self._ensure_pool()
        try:
            future: Future[T | Failed] = pool.submit(fn, *args)
        except Exception:  # broken, shut down meanwhile, or no worker could be started
            log.exception("file worker could not take the call")
            self._recycle(pool)
            return _worker_failed()
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            self._recycle(pool)
            return _worker_failed()
        except asyncio.CancelledError:
            # The caller gave up (its timeout): the worker may be stuck in this call, so
            # it is killed rather than left holding one of the few slots.
            if not future.cancel():
                self._recycle(pool)
            raise

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(list(PRELOAD))  # only until the server starts
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=context,
                initializer=become,
                initargs=(self.root, self.user.uid, self.user.gid, lifeline.this_process()),
            )
        return self._pool

    def _recycle(self, pool: ProcessPoolExecutor) -> None:
        """Kill `pool`'s workers and forget it; the next call starts a fresh one."""
        if self._pool is pool:
            self._pool = None
        log.warning("file workers replaced (a worker died or overran a call)")
        # Private, but the only handle on the processes before Python 3.14's
        # terminate_workers(); a missing attribute only means nothing to kill.
        processes: dict[int, Any] = getattr(pool, "_processes", None) or {}
        for process in list(processes.values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def pids(self) -> list[int]:
        """The worker processes now running (none in-process or before the first call)."""
        processes: dict[int, Any] = getattr(self._pool, "_processes", None) or {}
        return sorted(processes)

    async def start(self) -> None:
        """Start the workers now rather than on the first call (spawning takes a moment)."""
        if self.isolated:
            await self.run(_ready)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _ready() -> bool:
    return True


def _worker_failed() -> Failed:
    return Failed(
        "worker_failed",
        "the file worker stopped before answering; the operation may not have happened. "
        "Check the file before retrying.",
    )


__all__ = ["DEFAULT_WORKERS", "PRELOAD", "FileWorkers", "become", "dumpable"]
