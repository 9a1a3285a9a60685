"""The file workers: the file tools' I/O runs as the sandbox user, never root; a worker
that dies or overruns a call is replaced, and its calls answer `worker_failed`."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.file_workers import FileWorkers, dumpable
from tether_tools_runner.sandbox import sandbox_user
from tether_tools_runner.tool import ToolFailure

Call = Callable[..., Awaitable[ToolResult]]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="dropping from root to the sandbox user is testable only as root"
)


@pytest.fixture
async def workers(workspace: Path) -> AsyncIterator[FileWorkers]:
    pool = FileWorkers(workspace, sandbox_user())
    try:
        yield pool
    finally:
        pool.close()


async def test_workers_act_as_the_sandbox_user(workers: FileWorkers) -> None:
    user = sandbox_user()
    assert workers.isolated
    assert await workers.run(os.getresuid) == (user.uid, user.uid, user.uid)
    assert await workers.run(os.getresgid) == (user.gid, user.gid, user.gid)
    assert await workers.run(os.getgroups) == []
    assert os.getpid() not in workers.pids()
    # Not dumpable: its /proc entries stay root's, so the sandbox user cannot ptrace it
    # or reach its pipes to the runner.
    assert await workers.run(dumpable) == 0
    for pid in workers.pids():
        assert os.stat(f"/proc/{pid}/fd").st_uid == 0


async def test_root_only_files_stay_unreadable_even_when_linked_in(
    executor: Executor, call: Call, workspace: Path
) -> None:
    """A hard link to a root-only file (which a root runner would read) meets the
    permission check of the sandbox user."""
    secret = workspace.parent / "root-only.txt"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    os.link(secret, workspace / "linked.txt")
    for tool, args in (
        ("file_read", {"path": "linked.txt"}),
        ("file_search", {"pattern": "root", "path": "linked.txt"}),
    ):
        result = await call(executor, tool, args)
        assert "root only" not in result.content, (tool, result.content)
    read = await call(executor, "file_read", {"path": "linked.txt"})
    assert read.error_code == "permission_denied", read.content
    denied = await call(executor, "file_write", {"path": "linked.txt", "content": "x"})
    assert denied.error_code == "path_denied"  # several hard links: never written
    assert secret.read_text() == "root only\n"


async def test_a_killed_worker_answers_worker_failed_and_is_replaced(
    workers: FileWorkers,
) -> None:
    await workers.start()
    before = workers.pids()
    assert before
    stuck = asyncio.create_task(workers.run(time.sleep, 60))
    await asyncio.sleep(0)  # let the task submit its call
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(ToolFailure) as caught:
        await stuck
    assert caught.value.code == "worker_failed"
    assert await workers.run(os.getresuid) == (sandbox_user().uid,) * 3
    assert not set(before) & set(workers.pids())


async def test_a_call_given_up_kills_its_worker_instead_of_leaving_it_stuck(
    workers: FileWorkers,
) -> None:
    await workers.start()
    before = workers.pids()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await workers.run(time.sleep, 60)
    # Both slots are free again: two calls at once both answer.
    first, second = await asyncio.gather(workers.run(os.getpid), workers.run(os.getpid))
    assert {first, second} <= set(workers.pids())
    assert not set(before) & set(workers.pids())


async def test_many_calls_at_once_share_the_bounded_pool(workers: FileWorkers) -> None:
    pids = await asyncio.gather(*(workers.run(os.getpid) for _ in range(40)))
    assert 1 <= len(set(pids)) <= 2
