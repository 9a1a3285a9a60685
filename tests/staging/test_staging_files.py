"""Staged `file_write`/`file_edit` in the runner: the change set is computed against a
scratch copy (the workspace does not change), approving applies exactly it, and a file
changed underneath makes the apply stale with nothing applied."""

from __future__ import annotations

import hashlib
from pathlib import Path

from staged_runner import Runner
from tether_common.messages.staging import ABSENT, STALE_EFFECT, TRUNCATED_MARKER
from tether_tools_runner.sandbox import hand_over, sandbox_user

EDIT = {"path": "notes/app.cfg", "old_text": "debug = true", "new_text": "debug = false"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def own(workspace: Path) -> None:
    """What the test wrote as root becomes the sandbox user's, as the tools leave it."""
    hand_over(workspace, sandbox_user())


async def test_a_staged_edit_shows_its_diff_and_applies_exactly_it(
    runner: Runner, workspace: Path
) -> None:
    (workspace / "notes").mkdir()
    target = workspace / "notes" / "app.cfg"
    target.write_text("name = demo\ndebug = true\n")
    own(workspace)
    before = target.read_bytes()
    assert (await runner.run("file_read", {"path": "notes/app.cfg"})).ok

    staged = await runner.stage("file_edit", EDIT)
    assert staged.stageable, staged.reason
    assert staged.changes is not None
    [entry] = staged.changes.entries
    assert (entry.path, entry.change, entry.type) == ("notes/app.cfg", "modified", "text")
    assert entry.base == sha(before)
    assert entry.diff is not None
    assert "-debug = true\n+debug = false\n" in entry.diff
    assert target.read_bytes() == before  # staging changed nothing

    result = await runner.apply("file_edit", EDIT, staged.changes.digest)
    assert result.ok, result.content
    assert result.applied == staged.changes.digest
    assert target.read_text() == "name = demo\ndebug = false\n"
    assert entry.digest == sha(target.read_bytes())

    # The key holds: the same apply again replays the recorded outcome, changes nothing.
    target.write_text("changed by hand\n")
    again = await runner.apply("file_edit", EDIT, staged.changes.digest)
    assert again == result
    assert target.read_text() == "changed by hand\n"


async def test_a_concurrent_change_makes_the_apply_stale_and_nothing_is_applied(
    runner: Runner, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("one\n")
    own(workspace)
    args = {"path": "a.txt", "content": "two\n"}
    first = await runner.stage("file_write", args)
    assert first.changes is not None
    (workspace / "a.txt").write_text("someone else\n")

    stale = await runner.apply("file_write", args, first.changes.digest)
    assert stale.error_code == STALE_EFFECT, stale.content
    assert "a.txt" in stale.content
    assert (workspace / "a.txt").read_text() == "someone else\n"

    # Staged again: a new set over the new base, which the same call's key may apply.
    second = await runner.stage("file_write", args)
    assert second.changes is not None
    assert second.changes.digest != first.changes.digest
    assert "-someone else\n+two\n" in (second.changes.entries[0].diff or "")
    applied = await runner.apply("file_write", args, second.changes.digest)
    assert applied.ok, applied.content
    assert (workspace / "a.txt").read_text() == "two\n"


async def test_a_created_file_is_stale_when_someone_made_it_meanwhile(
    runner: Runner, workspace: Path
) -> None:
    args = {"path": "new/file.txt", "content": "mine\n"}
    staged = await runner.stage("file_write", args)
    assert staged.changes is not None
    assert staged.changes.entries[0].base == ABSENT
    assert staged.changes.entries[0].change == "created"
    assert not (workspace / "new").exists()
    (workspace / "new").mkdir()
    (workspace / "new" / "file.txt").write_text("theirs\n")
    result = await runner.apply("file_write", args, staged.changes.digest)
    assert result.error_code == STALE_EFFECT
    assert (workspace / "new" / "file.txt").read_text() == "theirs\n"


async def test_an_apply_for_another_call_or_digest_is_refused(
    runner: Runner, workspace: Path
) -> None:
    args = {"path": "x.txt", "content": "x\n"}
    staged = await runner.stage("file_write", args, call_id="c1")
    assert staged.changes is not None
    other_args = {"path": "x.txt", "content": "evil\n"}
    for result in (
        await runner.apply("file_write", other_args, staged.changes.digest, call_id="c1"),
        await runner.apply("file_write", args, staged.changes.digest, call_id="c2"),
        await runner.apply("file_write", args, "0" * 64, call_id="c3"),
    ):
        assert not result.ok
        assert result.error_code in ("staged_unknown", "key_conflict"), result.content
    assert not (workspace / "x.txt").exists()


async def test_an_edit_that_cannot_run_is_not_stageable(runner: Runner, workspace: Path) -> None:
    (workspace / "b.txt").write_text("text\n")
    own(workspace)
    never_read = await runner.stage(
        "file_edit", {"path": "b.txt", "old_text": "t", "new_text": "u"}
    )
    assert not never_read.stageable
    assert never_read.error_code == "not_read", never_read.reason
    outside = await runner.stage("file_write", {"path": "../evil", "content": "x"})
    assert not outside.stageable
    assert outside.error_code == "path_denied", outside.reason


async def test_a_long_diff_is_cut_with_a_marker_and_the_whole_content_applied(
    runner: Runner, workspace: Path
) -> None:
    content = "".join(f"line {i}\n" for i in range(20_000))
    args = {"path": "big.txt", "content": content}
    staged = await runner.stage("file_write", args)
    assert staged.changes is not None
    entry = staged.changes.entries[0]
    assert entry.diff_truncated
    assert staged.changes.truncated
    assert entry.diff is not None
    assert entry.diff.endswith(TRUNCATED_MARKER)
    assert len(entry.diff) < 20_000
    assert (await runner.apply("file_write", args, staged.changes.digest)).ok
    assert (workspace / "big.txt").read_text() == content
