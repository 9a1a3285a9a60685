"""`python lifeline_parent.py WAY`: a process that starts helpers the way WAY says, prints
`ready` once they run, and waits to be killed (tests/common/test_lifeline.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from tether_common import lifeline

SLEEP = ["sleep", "300"]
NOBODY = 65534


def _nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def plain() -> None:
    subprocess.Popen(SLEEP)


def preexec() -> None:
    subprocess.Popen(SLEEP, preexec_fn=lifeline.preexec())


def preexec_as_another_user() -> None:
    # A user change clears the parent-death signal: armed after it, it holds.
    subprocess.Popen(SLEEP, preexec_fn=lifeline.preexec(_nobody))


def asyncio_spawn() -> None:
    async def spawn() -> None:
        await asyncio.create_subprocess_exec(*SLEEP, preexec_fn=lifeline.preexec())

    loop = asyncio.new_event_loop()  # kept open: the child's transport stays with it
    loop.run_until_complete(spawn())


def popen_from_a_thread_that_ends() -> None:
    # The kernel's parent is the forking thread; this one ends before the check below.
    thread = threading.Thread(target=lifeline.popen, args=(SLEEP,))
    thread.start()
    thread.join()


def command() -> None:
    subprocess.Popen(lifeline.command(SLEEP))


def arm() -> None:
    code = "import sys, time; from tether_common import lifeline; "
    code += "lifeline.arm(int(sys.argv[1])); print('armed', flush=True); time.sleep(300)"
    child = subprocess.Popen([sys.executable, "-c", code, str(os.getpid())], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"armed\n"


def _forkserver_pool(watched: bool) -> None:
    context = multiprocessing.get_context("forkserver")
    if watched:  # as the runner's file workers: each watches this process
        pool = ProcessPoolExecutor(
            2, mp_context=context, initializer=lifeline.watch, initargs=(lifeline.this_process(),)
        )
    else:
        pool = ProcessPoolExecutor(2, mp_context=context)
    # Two calls at once: both workers start (with the fork server and the tracker).
    list(pool.map(time.sleep, [0.3, 0.3]))
    _pools.append(pool)


_pools: list[ProcessPoolExecutor] = []


def forkserver_plain() -> None:
    _forkserver_pool(watched=False)


def forkserver_watched() -> None:
    _forkserver_pool(watched=True)


WAYS = {
    "plain": plain,
    "preexec": preexec,
    "preexec_as_another_user": preexec_as_another_user,
    "asyncio": asyncio_spawn,
    "popen_from_a_thread_that_ends": popen_from_a_thread_that_ends,
    "command": command,
    "arm": arm,
    "forkserver_plain": forkserver_plain,
    "forkserver_watched": forkserver_watched,
}

if __name__ == "__main__":
    WAYS[sys.argv[1]]()
    print("ready", flush=True)  # noqa: T201 - the test waits for this line
    time.sleep(300)
