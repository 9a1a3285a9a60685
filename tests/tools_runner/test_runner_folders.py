"""The `per_tree` workspace layout (issue 15, item 6): each run tree works in its own
folder under a root only the runner may change; a folder is made by directory fd and
handed to the sandbox user; no call of one tree reaches another tree's folder, through
the file tools or the shell."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.folders import ROOT_MODE, Workspaces, make_folder
from tether_tools_runner.sandbox import sandbox_user
from tether_tools_runner.tool import ToolFailure

MakeExecutor = Callable[..., Executor]


@pytest.fixture
def per_tree(make_executor: MakeExecutor, workspace: Path) -> Executor:
    Workspaces(workspace, "per_tree", sandbox_user()).prepare()  # as the app does at start
    return make_executor(workspace_layout="per_tree")


async def run(
    executor: Executor, name: str, args: dict[str, Any], *, run_id: str, tree: str | None = None
) -> ToolResult:
    call = ExecuteTool(
        run_id=run_id, call_id=uuid.uuid4().hex[:8], name=name, args=args, workspace=tree
    )
    return await executor.execute(call)


async def test_each_tree_has_its_own_folder(per_tree: Executor, workspace: Path) -> None:
    wrote = await run(per_tree, "file_write", {"path": "a.txt", "content": "A"}, run_id="tree-a")
    assert wrote.ok, wrote.content
    folder = workspace / "tree-a"
    info = folder.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, sandbox_user().uid)
    assert stat.S_IMODE(workspace.stat().st_mode) == ROOT_MODE
    assert (folder / "a.txt").read_text() == "A"
    # A sub-agent names its tree's folder and sees the file; another tree does not.
    child = await run(per_tree, "file_read", {"path": "a.txt"}, run_id="child", tree="tree-a")
    assert child.ok, child.content
    other = await run(per_tree, "file_read", {"path": "a.txt"}, run_id="tree-b")
    assert other.error_code == "not_found", other.content


@pytest.mark.parametrize(
    "path", ["../tree-a/a.txt", "{root}/tree-a/a.txt", "{root}/tree-b/../tree-a/a.txt"]
)
async def test_no_path_leads_into_another_tree(
    per_tree: Executor, workspace: Path, path: str
) -> None:
    await run(per_tree, "file_write", {"path": "a.txt", "content": "secret"}, run_id="tree-a")
    seen = await run(per_tree, "file_read", {"path": path.format(root=workspace)}, run_id="tree-b")
    assert not seen.ok
    assert "secret" not in seen.content


async def test_the_shell_sees_only_its_trees_folder(per_tree: Executor, workspace: Path) -> None:
    await run(per_tree, "file_write", {"path": "a.txt", "content": "secret"}, run_id="tree-a")
    listing = await run(
        per_tree,
        "shell",
        {"command": f"ls ..; cat ../tree-a/a.txt {workspace}/tree-a/a.txt 2>&1 | wc -c; echo end"},
        run_id="tree-b",
    )
    assert listing.ok, listing.content
    assert "secret" not in listing.content
    assert "tree-a" not in listing.content  # not even listed


def test_a_symlink_or_a_foreign_folder_is_never_used(workspace: Path) -> None:
    Workspaces(workspace, "per_tree", sandbox_user()).prepare()
    (workspace / "linked").symlink_to("/etc")
    with pytest.raises(ToolFailure) as refused:
        make_folder(workspace, "linked", sandbox_user())
    assert refused.value.code == "workspace_unavailable"
    if os.geteuid() == 0:
        foreign = workspace / "foreign"
        foreign.mkdir(mode=0o755)
        os.chown(foreign, 12345, 12345)
        with pytest.raises(ToolFailure):
            make_folder(workspace, "foreign", sandbox_user())
        assert stat.S_IMODE(foreign.stat().st_mode) == 0o755  # left as it was


@pytest.mark.parametrize("run_id", ["..", ".", "a/b", "-"])
async def test_a_bad_folder_name_is_refused(per_tree: Executor, run_id: str) -> None:
    """A run id that is no plain folder name (the folder of a call naming none)."""
    result = await run(per_tree, "file_list", {}, run_id=run_id)
    if run_id == "-":
        assert result.ok, result.content
        return
    assert result.error_code == "workspace_invalid", result.content
