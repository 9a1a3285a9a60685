"""Applying a staged change set cannot be led outside the workspace or onto another file
by swapping paths between staging and approval: every touched path is reached beneath
the workspace's fd without following links, its base is checked, and files are placed
with `linkat` (which never replaces and never writes through a link)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from staged_runner import Runner
from tether_tools_runner.sandbox import hand_over, sandbox_user

BASE = "base content\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "f.txt").write_text(BASE)  # the same content as the staged base
    (folder / "secret.txt").write_text("secret\n")
    os.chmod(folder, 0o777)  # so only the runner's care, not permissions, keeps it safe
    os.chmod(folder / "f.txt", 0o666)
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def _link_file(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub" / "f.txt").symlink_to(out / "f.txt")


def _link_folder(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(out)


def _hard_link(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    os.link(out / "f.txt", ws / "sub" / "f.txt")


def _fifo(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    os.mkfifo(ws / "sub" / "f.txt")


def _folder(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub" / "f.txt").mkdir()


def _link_inside_folder(ws: Path, out: Path) -> None:
    os.rename(ws / "sub", ws / "moved")
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").symlink_to(ws / "moved" / "f.txt")


def _relative_link(ws: Path, out: Path) -> None:
    (ws / "sub" / "f.txt").unlink()
    (ws / "sub" / "f.txt").symlink_to(os.path.relpath(out / "f.txt", ws / "sub"))


SWAPS: dict[str, Callable[[Path, Path], None]] = {
    "file to symlink out": _link_file,
    "folder to symlink out": _link_folder,
    "file to hard link of an outside file with the base content": _hard_link,
    "file to fifo": _fifo,
    "file to folder": _folder,
    "folder swapped, file a symlink to the moved one": _link_inside_folder,
    "file to relative symlink out": _relative_link,
}


@pytest.mark.parametrize("swap", list(SWAPS), ids=list(SWAPS))
async def test_a_swap_between_staging_and_apply_never_writes_elsewhere(
    runner: Runner, workspace: Path, outside: Path, swap: str
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text(BASE)
    hand_over(workspace, sandbox_user())
    args = {"path": "sub/f.txt", "content": "NEW\n"}
    staged = await runner.stage("file_write", args)
    assert staged.changes is not None, staged.reason
    before = snapshot(outside)

    SWAPS[swap](workspace, outside)
    result = await runner.apply("file_write", args, staged.changes.digest)

    assert snapshot(outside) == before
    assert os.stat(outside / "f.txt").st_nlink >= 1
    if result.ok:
        # Only the hard link keeps the base content; the new file then replaced the
        # workspace's name, never the outside file it was linked to.
        assert swap.startswith("file to hard link")
        assert (workspace / "sub" / "f.txt").read_text() == "NEW\n"
        assert os.stat(workspace / "sub" / "f.txt").st_ino != os.stat(outside / "f.txt").st_ino
    else:
        assert result.error_code in ("stale_effect", "path_denied"), result.content
    assert not [p for p in workspace.rglob(".tether-*") if not p.is_symlink()]


async def test_a_created_file_is_never_placed_through_a_folder_link(
    runner: Runner, workspace: Path, outside: Path
) -> None:
    args = {"path": "newdir/n.txt", "content": "made\n"}
    staged = await runner.stage("file_write", args)
    assert staged.changes is not None
    (workspace / "newdir").symlink_to(outside)
    result = await runner.apply("file_write", args, staged.changes.digest)
    assert not result.ok
    assert not (outside / "n.txt").exists()


@contextlib.contextmanager
def flipping(workspace: Path, outside: Path) -> Iterator[None]:
    """Swap `sub` between the real folder and a symlink to `outside`, over and over."""
    stop = threading.Event()

    def flip() -> None:
        sub, hold = workspace / "sub", workspace / "hold"
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.rename(sub, hold)
                os.symlink(outside, sub)
                os.unlink(sub)
                os.rename(hold, sub)

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


async def test_applies_racing_a_folder_flipped_to_a_symlink_never_write_outside(
    runner: Runner, workspace: Path, outside: Path
) -> None:
    (workspace / "sub").mkdir()
    hand_over(workspace, sandbox_user())
    calls = []
    for index in range(12):
        args = {"path": f"sub/f{index}.txt", "content": f"file {index}\n"}
        staged = await runner.stage("file_write", args, call_id=f"race{index}")
        assert staged.changes is not None
        calls.append((args, staged.changes.digest, f"race{index}"))
    before = snapshot(outside)
    with flipping(workspace, outside):
        results = [await runner.apply("file_write", a, d, call_id=c) for a, d, c in calls]
    assert snapshot(outside) == before
    # An apply may also have made `sub` again while it was away (missing parents are
    # made): a file applied is in the workspace, under one name or another, never a link.
    found = {
        name: Path(top, name).read_text()
        for top, _dirs, files in os.walk(workspace, followlinks=False)
        for name in files
        if not Path(top, name).is_symlink()
    }
    for (args, _digest, _call), result in zip(calls, results, strict=True):
        name = args["path"].split("/")[1]
        if result.ok:
            assert found[name] == args["content"]
        else:
            # Refused with nothing applied: which check saw the flip depends on its moment.
            refusals = ("stale_effect", "path_denied", "not_found", "not_a_directory")
            assert result.error_code in refusals, result.content
