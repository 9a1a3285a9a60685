"""Every file tool against hostile workspace contents: symlinks at every depth and of
every kind, `..` chains, absolute paths, protected names behind links, special files and
hard links. Nothing outside is returned, listed, searched or changed, and nothing blocks."""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import hand_over, sandbox_user

Call = Callable[..., Awaitable[ToolResult]]
CANARY = "CANARY-hostile-9c1e"


@pytest.fixture
def hostile(workspace: Path) -> Iterator[Path]:
    """a/b/c/f.txt inside; outside (the sandbox user's too) mirrors it with canaries."""
    outside = workspace.parent / "outside"
    for top, text in ((workspace / "a", "inside"), (outside, CANARY)):
        (top / "b" / "c").mkdir(parents=True)
        (top / "b" / "c" / "f.txt").write_text(f"{text}\n")
        (top / "f.txt").write_text(f"{text}\n")
    (outside / ".env").write_text(f"TOKEN={CANARY}\n")
    user = sandbox_user()
    hand_over(workspace, user)
    for folder, dirs, files in os.walk(outside):
        for name in (".", *dirs, *files):
            os.chown(Path(folder, name), user.uid, user.gid)
    workspace.parent.chmod(0o755)  # so a link to outside works for the sandbox user
    before = _tree(outside)
    yield workspace
    assert _tree(outside) == before, "something outside the workspace changed"


def _tree(top: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(top)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
        for p in [top, *top.rglob("*")]
    }


LINK_TARGETS = {
    "out-dir": "{outside}",
    "out-file": "{outside}/f.txt",
    "rel-out": "{up}outside",
    "in-dir": "{ws}/a/b",
    "in-file": "{ws}/a/f.txt",
    "dangling": "{outside}/missing",
    "loop": "loop",
    "root": "/",
    "proc": "/proc/self/cwd",
    "env": "{outside}/.env",
}
DEPTHS = ["a", "a/b", "a/b/c", "a/b/c/f.txt"]


def _calls(target: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("file_read", {"path": f"{target}/b/c/f.txt" if target == "a" else target}),
        ("file_read", {"path": "a/b/c/f.txt"}),
        ("file_list", {"path": target}),
        ("file_list", {"path": ".", "recursive": True}),
        ("file_search", {"pattern": "CANARY"}),
        ("file_search", {"pattern": "CANARY", "path": target}),
        ("file_write", {"path": "a/b/c/f.txt", "content": "written\n"}),
        ("file_write", {"path": f"{target}/new.txt", "content": "new\n"}),
        ("file_edit", {"path": "a/b/c/f.txt", "old_text": "written", "new_text": "edited"}),
    ]


@pytest.mark.parametrize("depth", DEPTHS)
async def test_symlinks_at_every_depth_are_never_followed(
    hostile: Path, executor: Executor, call: Call, depth: str
) -> None:
    outside = hostile.parent / "outside"
    for label, template in LINK_TARGETS.items():
        place = hostile / depth
        moved = place.with_name(place.name + ".real")
        place.rename(moved)
        up = "../" * len(depth.split("/"))
        place.symlink_to(template.format(outside=outside, ws=hostile, up=up))
        try:
            await call(executor, "file_read", {"path": "a/b/c/f.txt"})  # for file_edit
            for tool, args in _calls(depth):
                result = await call(executor, tool, args)
                assert CANARY not in result.content, (label, tool, args, result.content)
            through = await call(executor, "file_read", {"path": "a/b/c/f.txt"})
            assert through.error_code == "path_denied", (label, through.content)
            assert "symbolic link" in through.content
        finally:
            place.unlink()
            moved.rename(place)


@pytest.mark.parametrize(
    "path",
    [
        "../outside/f.txt",
        "a/../../outside/f.txt",
        "a/b/c/../../../../outside/f.txt",
        "./../outside",
        "{outside}/f.txt",
        "{ws}/../outside/f.txt",
        "{ws}/a/../../outside/f.txt",
        "{ws}-other/f.txt",
        "/proc/self/root{outside}/f.txt",
        "~/f.txt",
        "a/.env",
        "a/.git/config",
        "a/b/id_rsa",
    ],
)
async def test_dot_dot_absolute_and_protected_paths_are_refused_by_every_tool(
    hostile: Path, executor: Executor, call: Call, path: str
) -> None:
    path = path.format(outside=hostile.parent / "outside", ws=hostile)
    for tool, args in (
        ("file_read", {"path": path}),
        ("file_list", {"path": path}),
        ("file_search", {"pattern": "CANARY", "path": path}),
        ("file_write", {"path": path, "content": "x"}),
        ("file_edit", {"path": path, "old_text": "x", "new_text": "y"}),
    ):
        result = await call(executor, tool, args)
        assert result.error_code == "path_denied", (tool, path, result.content)


async def test_protected_names_behind_links_and_in_folders_stay_hidden(
    hostile: Path, executor: Executor, call: Call
) -> None:
    (hostile / "a" / ".env").write_text(f"TOKEN={CANARY}\n")
    (hostile / "a" / "notes.txt").symlink_to(hostile / "a" / ".env")
    (hostile / "a" / "key.txt").symlink_to(hostile.parent / "outside" / ".env")
    (hostile / ".docker").mkdir()  # secret only as a pair: .docker/config.json
    (hostile / ".docker" / "config.json").write_text(f'{{"auth": "TOKEN={CANARY}"}}\n')
    (hostile / ".config" / "gcloud").mkdir(parents=True)
    (hostile / ".config" / "gcloud" / "creds").write_text(f"TOKEN={CANARY}\n")
    for tool, args in (
        ("file_read", {"path": "a/notes.txt"}),
        ("file_read", {"path": "a/key.txt"}),
        ("file_list", {"path": "a", "recursive": True}),
        ("file_list", {"recursive": True, "exclude": []}),
        ("file_list", {"path": ".docker"}),
        ("file_search", {"pattern": "TOKEN"}),
        ("file_search", {"pattern": "TOKEN", "path": ".config"}),
    ):
        result = await call(executor, tool, args)
        assert CANARY not in result.content, (tool, result.content)
        for secret in (".env", "config.json", "gcloud"):
            assert secret not in result.content, (tool, result.content)
    read = await call(executor, "file_read", {"path": ".docker/config.json"})
    assert read.error_code == "path_denied"


async def test_special_files_are_refused_without_blocking(
    hostile: Path, executor: Executor, call: Call
) -> None:
    os.mkfifo(hostile / "a" / "fifo")
    os.mknod(hostile / "a" / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    for name in ("fifo", "zero"):
        read = await call(executor, "file_read", {"path": f"a/{name}"})
        assert read.error_code == "not_a_file", read.content
        search = await call(executor, "file_search", {"pattern": "x", "path": f"a/{name}"})
        assert not search.ok or search.content.startswith("no matches"), search.content
        write = await call(executor, "file_write", {"path": f"a/{name}", "content": "x"})
        assert write.error_code == "not_a_file", write.content
    everywhere = await call(executor, "file_search", {"pattern": "inside"})
    assert everywhere.content.splitlines() == ["a/b/c/f.txt:1: inside", "a/f.txt:1: inside"]
    assert stat.S_ISFIFO(os.lstat(hostile / "a" / "fifo").st_mode)


async def test_hard_links_and_the_root_are_never_written(
    hostile: Path, executor: Executor, call: Call
) -> None:
    outside = hostile.parent / "outside"
    os.link(outside / "f.txt", hostile / "a" / "hard.txt")
    write = await call(executor, "file_write", {"path": "a/hard.txt", "content": "x"})
    assert write.error_code == "path_denied"
    assert "hard links" in write.content
    assert (await call(executor, "file_read", {"path": "a/hard.txt"})).ok
    edit = {"path": "a/hard.txt", "old_text": CANARY, "new_text": "x"}
    assert (await call(executor, "file_edit", edit)).error_code == "path_denied"
    for path in (".", "a/..", str(hostile)):
        root = await call(executor, "file_write", {"path": path, "content": "x"})
        assert root.error_code == "path_denied", (path, root.content)


async def test_ordinary_work_still_works(hostile: Path, executor: Executor, call: Call) -> None:
    assert (await call(executor, "file_write", {"path": "a/b/new/x.txt", "content": "1\n"})).ok
    listed = await call(executor, "file_list", {"path": "a", "recursive": True})
    assert listed.content.splitlines() == [
        "a/b/",
        "a/b/c/",
        "a/b/c/f.txt  7",
        "a/b/new/",
        "a/b/new/x.txt  2",
        "a/f.txt  7",
    ]
    read = await call(executor, "file_read", {"path": f"{hostile}/a/./b/new/../new/x.txt"})
    assert read.content.startswith("a/b/new/x.txt (lines 1-1 of 1;")
    edit = {"path": "a/b/new/x.txt", "old_text": "1", "new_text": "2"}
    assert (await call(executor, "file_edit", edit)).ok
    assert (hostile / "a" / "b" / "new" / "x.txt").read_text() == "2\n"
    assert os.stat(hostile / "a" / "b" / "new" / "x.txt").st_uid == sandbox_user().uid
