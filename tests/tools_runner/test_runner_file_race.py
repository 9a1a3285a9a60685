"""The swap race, as a sandboxed shell ran it: a process exchanges a workspace folder with
a symlink to outside (renameat2 RENAME_EXCHANGE) in a tight loop while the file tools
work on paths through that folder. Thousands of attempts, zero escapes: no canary from
outside is ever returned, and the outside tree is byte-for-byte (and inode-for-inode)
what it was. The harness is first shown to catch a check-then-open reader, so a pass
means something."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from shipped import observe, one_service
from tether_common.bus import Bus
from tether_common.errors import PathDenied
from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.safety import resolve
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import hand_over, sandbox_user

Call = Callable[..., Awaitable[ToolResult]]
CANARY = "CANARY-7f3a-outside"
INSIDE = "inside-note"

# The swapper: what `shell` ran in the sandbox, as a process of its own (so it does not
# compete with the tools for this interpreter's lock).
SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
print("ready", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)
"""


def build(root: Path) -> Path:
    """ws/d (the folder raced) beside ws/link -> ../outside, which mirrors d's layout."""
    outside = root.parent / "outside"
    for top, text in ((root / "d", INSIDE), (outside, CANARY)):
        (top / "sub").mkdir(parents=True, exist_ok=True)
        (top / "note.txt").write_text(f"{text}\n")
        (top / "sub" / "deep.txt").write_text(f"{text} deep\n")
        (top / "edit.txt").write_text("edit me\n")  # the same text on both sides
    (outside / f"{CANARY}.txt").write_text("a name only outside\n")
    # Relative, and through a parent the sandbox user may cross: the link works for the
    # tools' own user, so only the open beneath the root can keep them from following it.
    (root / "link").symlink_to("../outside")
    root.parent.chmod(0o755)
    user = sandbox_user()
    hand_over(root, user)
    # Outside is the sandbox user's too (think of another workspace, or a shared /tmp):
    # only the open beneath the root, not file permissions, may keep the tools out.
    for folder, dirs, files in os.walk(outside):
        for name in (".", *dirs, *files):
            os.chown(Path(folder, name), user.uid, user.gid, follow_symlinks=False)
    return root


def snapshot(base: Path) -> dict[str, tuple[str, bytes, int, int]]:
    """Everything under `base` except the workspace: kind, bytes, inode, mtime."""
    found: dict[str, tuple[str, bytes, int, int]] = {}
    for folder, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if Path(folder, d) != base / "ws"]
        for name in (*dirs, *files):
            path = Path(folder, name)
            info = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            data = path.read_bytes() if kind == "file" else b""
            found[str(path.relative_to(base))] = (kind, data, info.st_ino, info.st_mtime_ns)
    return found


@asynccontextmanager
async def swapping(root: Path) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SWAPPER, str(root / "d"), str(root / "link"),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert await proc.stdout.readline() == b"ready\n"
        yield
    finally:
        proc.kill()
        await proc.wait()


@pytest.fixture
def raced(workspace: Path) -> Iterator[Path]:
    """The executor's workspace, built for the race; the rest of its parent is watched."""
    root = build(workspace)
    before = snapshot(root.parent)
    yield root
    assert snapshot(root.parent) == before, "something outside the workspace changed"


class Tally:
    def __init__(self) -> None:
        self.ok = 0
        self.refused = 0

    def add(self, result: ToolResult) -> None:
        assert CANARY not in result.content, result.content
        if result.ok:
            self.ok += 1
        else:
            self.refused += 1

    def raced_both_ways(self) -> None:
        # Both outcomes prove the calls really met the folder in each state.
        assert self.ok, (self.ok, self.refused)
        assert self.refused, (self.ok, self.refused)


def naive_read(root: Path, path: str) -> bytes | None:
    """The old way: check with realpath, then open by name."""
    try:
        real = resolve(root, path, write=False)
        with open(real, "rb") as handle:
            return handle.read()
    except (PathDenied, OSError):
        return None


async def test_the_harness_catches_a_check_then_open_reader(raced: Path) -> None:
    escaped = 0
    async with swapping(raced):
        for _ in range(20_000):
            data = await asyncio.to_thread(naive_read, raced, "d/note.txt")
            if data is not None and CANARY.encode() in data:
                escaped += 1
                break
    assert escaped, "the swap never raced a naive reader: the harness proves nothing"


async def gather(calls: list[Awaitable[ToolResult]], tally: Tally) -> None:
    for result in await asyncio.gather(*calls):
        tally.add(result)


async def test_reads_lists_and_searches_never_escape(
    raced: Path, executor: Executor, call: Call
) -> None:
    reads, lists, searches = Tally(), Tally(), Tally()
    async with swapping(raced):
        for _ in range(100):
            await gather(
                [call(executor, "file_read", {"path": "d/note.txt"}) for _ in range(2)], reads
            )
            await gather([call(executor, "file_read", {"path": "d/sub/deep.txt"})], reads)
            await gather([call(executor, "file_list", {"path": "d", "recursive": True})], lists)
            await gather([call(executor, "file_list", {"recursive": True})], lists)
            await gather(
                [call(executor, "file_search", {"pattern": "CANARY", "path": "d"})], searches
            )
            await gather([call(executor, "file_search", {"pattern": "deep"})], searches)
    reads.raced_both_ways()
    lists.raced_both_ways()
    assert searches.ok


async def test_writes_and_edits_never_land_outside(
    raced: Path, executor: Executor, call: Call
) -> None:
    writes, edits = Tally(), Tally()
    outside = snapshot(raced.parent)
    async with swapping(raced):
        for attempt in range(250):
            args: list[dict[str, Any]] = [
                {"path": "d/edit.txt", "content": "edit me\n"},
                {"path": f"d/new-{attempt}.txt", "content": "x"},
                {"path": f"d/sub/fresh/{attempt}.txt", "content": "x"},
            ]
            await gather([call(executor, "file_write", one) for one in args], writes)
            read = await call(executor, "file_read", {"path": "d/edit.txt"})
            edits.add(read)
            change = {"path": "d/edit.txt", "old_text": "edit me", "new_text": "edited"}
            edits.add(await call(executor, "file_edit", change))
    writes.raced_both_ways()
    edits.raced_both_ways()
    assert writes.ok + writes.refused == 750
    assert snapshot(raced.parent) == outside, "a write or an edit landed outside"


@pytest.mark.e2e
async def test_the_swap_loop_against_the_real_runner_process(
    database_url: str, tmp_path: Path
) -> None:
    """The same race, with the calls sent over NATS to a tools-runner process running as
    root (its file workers drop to the sandbox user), as the brain would send them."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    root = build(workspace)
    before = snapshot(tmp_path)
    env = {
        "TETHER_RUNNER_WORKSPACE": str(workspace),
        "TETHER_RUNNER_MIN_SANDBOX": json.dumps({"shell": "rlimits"}),
    }
    async with one_service(
        "tools-runner", database_url, operator_token="race-token", extra_env=env, ready_s=90
    ) as supervisor:
        bus = await observe(supervisor)
        try:
            tallies = await _race_over_the_bus(bus, root)
        finally:
            await bus.close()
    for tally in tallies:
        tally.raced_both_ways()
    assert snapshot(tmp_path) == before, "something outside the workspace changed"


async def _race_over_the_bus(bus: Bus, root: Path) -> list[Tally]:
    async def send(name: str, args: dict[str, Any]) -> ToolResult:
        call = ExecuteTool(run_id="race", call_id=uuid.uuid4().hex[:8], name=name, args=args)
        return await bus.request(bus.subjects.tool_execute, call, timeout=30)

    reads, writes, others = Tally(), Tally(), Tally()
    async with swapping(root):
        for attempt in range(80):
            await gather([send("file_read", {"path": "d/note.txt"}) for _ in range(2)], reads)
            new = {"path": f"d/sub/{attempt}.txt", "content": "x"}
            await gather([send("file_write", new), send("file_write", new)], writes)
            await gather(
                [
                    send("file_list", {"path": "d", "recursive": True}),
                    send("file_search", {"pattern": "CANARY"}),
                    send("file_edit", {"path": "d/edit.txt", "old_text": "e", "new_text": "e"}),
                ],
                others,
            )
    return [reads, writes]


async def test_handing_the_workspace_over_never_chowns_outside(workspace: Path) -> None:
    """`hand_over` chowns what root left in the workspace at start; a swap mid-walk must
    not make it give away a file outside (here root's own)."""
    raced = build(workspace)
    outside = raced.parent / "outside"
    for index in range(200):  # the same names on both sides: a long walk to race
        for top in (raced / "d", outside):
            (top / f"many-{index}").write_text("x")
    _give_back_to_root(outside)
    user = sandbox_user()
    async with swapping(raced):
        for _ in range(100):
            _give_back_to_root(raced)  # so there is work to do
            await asyncio.to_thread(hand_over, raced, user)
            owners = {os.lstat(p).st_uid for p in [outside, *outside.rglob("*")]}
            assert owners == {0}, "hand_over gave away a file outside the workspace"


def _give_back_to_root(top: Path) -> None:
    """Chown a tree to root without following any symlink (by directory fd)."""
    os.chown(top, 0, 0, follow_symlinks=False)
    for _, dirs, files, dir_fd in os.fwalk(top, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                os.chown(name, 0, 0, dir_fd=dir_fd, follow_symlinks=False)
