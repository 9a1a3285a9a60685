"""File tools: confined to the workspace, protected names refused, and `file_edit`
refused unless this run read the file at its current revision."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor

Call = Callable[..., Awaitable[ToolResult]]


async def test_read_numbers_lines_and_reports_a_revision(
    executor: Executor, call: Call, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    result = await call(executor, "file_read", {"path": "a.txt", "offset": 2, "limit": 2})
    assert result.ok, result.content
    head, *lines = result.content.splitlines()
    assert head.startswith("a.txt (lines 2-3 of 4; sha256:")
    assert lines == ["     2\ttwo", "     3\tthree"]


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "/etc/passwd", "~/x", ".env", "sub/.git/config", "link/secret", "a\x00b"],
)
async def test_paths_outside_or_protected_are_refused(
    executor: Executor, call: Call, workspace: Path, path: str
) -> None:
    (workspace.parent / "outside.txt").write_text("secret")
    (workspace.parent / "secret").write_text("secret")
    os.symlink(workspace.parent, workspace / "link")
    for tool, args in (
        ("file_read", {"path": path}),
        ("file_write", {"path": path, "content": "x"}),
    ):
        result = await call(executor, tool, args)
        assert result.error_code == "path_denied", (tool, result.content)
    assert (workspace.parent / "outside.txt").read_text() == "secret"


async def test_write_then_edit_without_reread(
    executor: Executor, call: Call, workspace: Path
) -> None:
    wrote = await call(executor, "file_write", {"path": "src/app.py", "content": "DEBUG = True\n"})
    assert wrote.ok
    assert wrote.content.startswith("created src/app.py")
    edit = {"path": "src/app.py", "old_text": "True", "new_text": "False"}
    edited = await call(executor, "file_edit", edit)
    assert edited.ok, edited.content
    assert (workspace / "src/app.py").read_text() == "DEBUG = False\n"


async def test_edit_refused_unless_read_at_current_revision(
    executor: Executor, call: Call, workspace: Path
) -> None:
    target = workspace / "notes.md"
    target.write_text("alpha beta\n")
    edit = {"path": "notes.md", "old_text": "alpha", "new_text": "gamma"}
    assert (await call(executor, "file_edit", edit)).error_code == "not_read"
    assert (await call(executor, "file_read", {"path": "notes.md"})).ok
    target.write_text("alpha beta changed elsewhere\n")
    stale = await call(executor, "file_edit", edit)
    assert stale.error_code == "stale_revision", stale.content
    assert target.read_text() == "alpha beta changed elsewhere\n"
    other_run = await call(executor, "file_read", {"path": "notes.md"}, run_id="run-2")
    assert other_run.ok
    assert (await call(executor, "file_edit", edit)).error_code == "stale_revision"
    assert (await call(executor, "file_edit", edit, run_id="run-2")).ok
    assert target.read_text() == "gamma beta changed elsewhere\n"


async def test_edit_needs_a_unique_match(executor: Executor, call: Call, workspace: Path) -> None:
    (workspace / "x.txt").write_text("a a a\n")
    await call(executor, "file_read", {"path": "x.txt"})
    ambiguous = await call(
        executor, "file_edit", {"path": "x.txt", "old_text": "a", "new_text": "b"}
    )
    assert ambiguous.error_code == "ambiguous_match"
    missing = await call(executor, "file_edit", {"path": "x.txt", "old_text": "z", "new_text": "b"})
    assert missing.error_code == "no_match"
    every = {"path": "x.txt", "old_text": "a", "new_text": "b", "replace_all": True}
    assert (await call(executor, "file_edit", every)).ok
    assert (workspace / "x.txt").read_text() == "b b b\n"


async def test_list_and_search(executor: Executor, call: Call, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src/main.py").write_text("def main():\n    return 1\n")
    (workspace / "README.md").write_text("call main() to start\n")
    (workspace / ".env").write_text("TOKEN=main\n")
    (workspace / "blob.bin").write_bytes(b"main\x00\x01")
    flat = await call(executor, "file_list", {})
    assert flat.content.splitlines() == ["README.md  21", "blob.bin  6", "src/"]
    deep = await call(executor, "file_list", {"recursive": True, "exclude": ["*.bin"]})
    assert "src/main.py  25" in deep.content
    assert ".env" not in deep.content
    found = await call(executor, "file_search", {"pattern": "main("})
    assert found.content.splitlines() == [
        "README.md:1: call main() to start",
        "src/main.py:1: def main():",
    ]
    regex = {"pattern": r"^\s+return \d", "regex": True, "glob": "*.py"}
    assert (await call(executor, "file_search", regex)).content == "src/main.py:2:     return 1"
    bad = await call(executor, "file_search", {"pattern": "(", "regex": True})
    assert bad.error_code == "invalid_pattern"


async def test_binary_and_missing_files(executor: Executor, call: Call, workspace: Path) -> None:
    (workspace / "b.bin").write_bytes(b"\x00\x01\x02")
    assert (await call(executor, "file_read", {"path": "b.bin"})).error_code == "binary_file"
    assert (await call(executor, "file_read", {"path": "nope.txt"})).error_code == "not_found"
