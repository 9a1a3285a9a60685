"""A staged `shell` call runs in the sandbox against a scratch copy of the workspace: the
card's change set lists what it created, modified and deleted (binary files by size and
digest), approving applies exactly that, and commands whose effect may leave the
workspace are not stageable."""

from __future__ import annotations

import hashlib
from pathlib import Path

from staged_runner import Runner
from tether_tools_runner.sandbox import hand_over, sandbox_user


def own(workspace: Path) -> None:
    hand_over(workspace, sandbox_user())


async def test_a_staged_command_shows_created_modified_deleted_and_applies_them(
    runner: Runner, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("print('a')\nDEBUG = 1\n")
    (workspace / "old.log").write_text("noise\n")
    (workspace / "keep.txt").write_text("untouched\n")
    own(workspace)
    command = (
        "sed -i 's/DEBUG = 1/DEBUG = 0/' src/main.py && echo hello > made.txt && rm old.log "
        "&& mkdir -p out && printf '\\000\\001\\002binary' > out/blob.bin"
    )
    args = {"command": command}
    staged = await runner.stage("shell", args)
    assert staged.stageable, staged.reason
    assert staged.changes is not None
    by_path = {e.path: e for e in staged.changes.entries}
    assert {p: e.change for p, e in by_path.items()} == {
        "src/main.py": "modified",
        "made.txt": "created",
        "old.log": "deleted",
        "out": "created",
        "out/blob.bin": "created",
    }
    assert "-DEBUG = 1\n+DEBUG = 0\n" in (by_path["src/main.py"].diff or "")
    blob = by_path["out/blob.bin"]
    assert blob.type == "binary"
    assert blob.diff is None
    assert blob.size_after == 9
    assert blob.digest == hashlib.sha256(b"\x00\x01\x02binary").hexdigest()
    assert staged.changes.output is not None
    assert staged.changes.output.startswith("exit code 0")
    # The workspace itself is untouched until the approval.
    assert (workspace / "old.log").exists()
    assert not (workspace / "made.txt").exists()
    assert "DEBUG = 1" in (workspace / "src" / "main.py").read_text()

    result = await runner.apply("shell", args, staged.changes.digest)
    assert result.ok, result.content
    assert (workspace / "src" / "main.py").read_text() == "print('a')\nDEBUG = 0\n"
    assert (workspace / "made.txt").read_text() == "hello\n"
    assert not (workspace / "old.log").exists()
    assert (workspace / "out" / "blob.bin").read_bytes() == b"\x00\x01\x02binary"
    assert (workspace / "keep.txt").read_text() == "untouched\n"


async def test_a_removed_folder_is_deleted_deepest_first(runner: Runner, workspace: Path) -> None:
    (workspace / "tmpdir" / "inner").mkdir(parents=True)
    (workspace / "tmpdir" / "inner" / "x.txt").write_text("x\n")
    own(workspace)
    args = {"command": "rm -r tmpdir"}
    staged = await runner.stage("shell", args)
    assert staged.changes is not None, staged.reason
    assert [(e.path, e.change) for e in staged.changes.entries] == [
        ("tmpdir/inner/x.txt", "deleted"),
        ("tmpdir/inner", "deleted"),
        ("tmpdir", "deleted"),
    ]
    assert (await runner.apply("shell", args, staged.changes.digest)).ok
    assert not (workspace / "tmpdir").exists()


async def test_commands_that_may_leave_the_workspace_are_not_stageable(runner: Runner) -> None:
    for command in (
        "curl -s https://example.com -o page.html",
        "sudo touch /etc/x",
        "pip install requests",
    ):
        staged = await runner.stage("shell", {"command": command})
        assert not staged.stageable, command
        assert staged.changes is None
        assert "leave the workspace" in staged.reason or "deny" in staged.reason


async def test_a_command_that_makes_a_symlink_is_not_stageable(
    runner: Runner, workspace: Path
) -> None:
    staged = await runner.stage("shell", {"command": "ln -s /etc/passwd pw"})
    assert not staged.stageable
    assert "symbolic link" in staged.reason
    assert not (workspace / "pw").is_symlink()


async def test_a_command_that_changes_too_many_paths_is_not_stageable(runner: Runner) -> None:
    staged = await runner.stage("shell", {"command": "seq 1 600 | xargs touch"})
    assert not staged.stageable
    assert "too_many_changes" in staged.reason


async def test_a_command_whose_output_a_card_cannot_hold_is_not_stageable(
    runner: Runner, workspace: Path
) -> None:
    """An apply answers the staged output, which the stored set holds only up to what a
    card shows: a longer one is run the old way, so the model gets all of it."""
    staged = await runner.stage("shell", {"command": "seq 1 5000 && touch counted.txt"})
    assert not staged.stageable
    assert "longer than a card shows" in staged.reason
    assert not (workspace / "counted.txt").exists()
    short = await runner.stage("shell", {"command": "seq 1 5 && touch counted.txt"})
    assert short.stageable, short.reason
    assert short.changes is not None
    assert short.changes.output is not None
    assert short.changes.output.startswith("exit code 0\n1\n2\n3\n4\n5")
