"""`file_write` and `file_edit`: changing the workspace, with a read-before-write check.

`file_edit` refuses unless this run read (or wrote) the file at the revision it has
now, so a model never edits a file it has not seen or that changed under it. `write_op`
and `edit_op` are the I/O, run as the sandbox user by `FileWorkers`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tether_common.messages.tools import ToolDescriptor
from tether_common.safety.beneath import open_parent, replace_file
from tether_tools_runner.context import current_run_id
from tether_tools_runner.file_workers import FileWorkers
from tether_tools_runner.folders import WORKSPACE_REACH, Workspaces
from tether_tools_runner.revisions import Revisions, revision_of
from tether_tools_runner.tool import Tool, ToolFailure
from tether_tools_runner.workspace import (
    Parts,
    Place,
    decode_text,
    guarded,
    opened,
    read_child,
    shown,
    write_file,
)

MAX_CONTENT = 2_000_000

FILE_WRITE = ToolDescriptor(
    name="file_write",
    description=(
        "Creates a text file in the workspace, or replaces the whole content of an existing "
        "one; missing parent folders are created. Use it for new files; to change part of "
        "an existing file prefer `file_edit`. `path` is relative to the workspace; `content` "
        "is the complete new text (UTF-8, at most 2 MB). Protected names (.env, .git, keys) "
        "and paths outside the workspace are refused. Returns the new revision, so a "
        "following `file_edit` in this run needs no re-read. "
        'Example: {"path": "notes/todo.md", "content": "# To do\\n- ship\\n"}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "content": {"type": "string", "maxLength": MAX_CONTENT},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    scope="update",
    reach=WORKSPACE_REACH,
    effect="write",
    idempotent=False,
    aliases=["write_file", "create_file", "save_file"],
    output_trust="trusted",
    stageable=True,
)

FILE_EDIT = ToolDescriptor(
    name="file_edit",
    description=(
        "Replaces one exact piece of text in a workspace file. Read the file with "
        "`file_read` first in this run: the edit is refused with `stale_revision` if the "
        "file changed since (read it again), or `not_read` if it was never read. "
        "`old_text` must occur exactly once (copy it from the read, without the line "
        "numbers; include surrounding lines to make it unique) unless `replace_all` is "
        "true; `new_text` replaces it (empty deletes it). Fails with `no_match` or "
        "`ambiguous_match` otherwise. "
        'Example: {"path": "src/app.py", "old_text": "DEBUG = True", "new_text": "DEBUG = False"}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "old_text": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT},
            "new_text": {"type": "string", "maxLength": MAX_CONTENT},
            "replace_all": {"type": "boolean"},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    },
    scope="update",
    reach=WORKSPACE_REACH,
    effect="write",
    idempotent=False,
    aliases=["edit_file", "replace_in_file", "str_replace"],
    output_trust="trusted",
    stageable=True,
)


class WriteTools:
    def __init__(self, workspaces: Workspaces, workers: FileWorkers, book: Revisions) -> None:
        self.workspaces = workspaces
        self.workers = workers
        self.book = book

    async def write(self, args: dict[str, Any]) -> str:
        workspace = self.workspaces.current()
        parts = workspace.parts(args["path"])
        if not parts:
            raise ToolFailure("path_denied", "the workspace root itself cannot be written.")
        data = str(args["content"]).encode()
        existed = await self.workers.run(write_op, workspace.place, parts, data)
        revision = revision_of(data)
        await self.book.record(current_run_id.get(), shown(parts), revision)
        verb = "replaced" if existed else "created"
        return f"{verb} {shown(parts)} ({len(data)} bytes; {revision})"

    async def edit(self, args: dict[str, Any]) -> str:
        workspace = self.workspaces.current()
        parts = workspace.parts(args["path"])
        change = Change.of(args, await self.book.seen(current_run_id.get(), shown(parts)))
        count, revision = await self.workers.run(edit_op, workspace.place, parts, change)
        await self.book.record(current_run_id.get(), shown(parts), revision)
        return f"edited {shown(parts)}: {count} replacement(s) ({revision})"


@dataclass(frozen=True, slots=True)
class Change:
    """An edit as the worker needs it, with the revision this run last saw (or None)."""

    old: str
    new: str
    replace_all: bool
    seen: str | None

    @classmethod
    def of(cls, args: dict[str, Any], seen: str | None) -> Change:
        """The edit a `file_edit` call's arguments ask for."""
        return cls(
            old=str(args["old_text"]),
            new=str(args["new_text"]),
            replace_all=bool(args.get("replace_all", False)),
            seen=seen,
        )


@guarded
def write_op(place: Place, parts: Parts, data: bytes) -> bool:
    return write_file(place, parts, data)


@guarded
def edit_op(place: Place, parts: Parts, change: Change) -> tuple[int, str]:
    """Read, check the revision, replace, write back - all within one folder fd, so the
    file read is the file written."""
    with opened(place) as base:
        dir_fd, name = open_parent(base, parts, create=False)
    try:
        data = read_child(dir_fd, name, parts)
        decode_text(data, parts)  # a binary file is refused as file_read refuses it
        check_revision(parts, change.seen, revision_of(data))
        text, count = replaced(data, change)
        updated = text.encode()
        replace_file(dir_fd, name, updated)
    finally:
        os.close(dir_fd)
    return count, revision_of(updated)


def check_revision(parts: Parts, seen: str | None, current: str) -> None:
    if seen is None:
        raise ToolFailure(
            "not_read", f"{shown(parts)} was not read in this run; file_read it first."
        )
    if seen != current:
        raise ToolFailure(
            "stale_revision",
            f"{shown(parts)} changed since this run read it ({seen} → {current}); read it again.",
        )


def replaced(data: bytes, change: Change) -> tuple[str, int]:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ToolFailure("not_utf8", "the file is not UTF-8 text; file_write it whole.") from None
    count = text.count(change.old)
    if count == 0:
        raise ToolFailure(
            "no_match", "old_text does not occur in the file; read it again and copy exactly."
        )
    if count > 1 and not change.replace_all:
        raise ToolFailure(
            "ambiguous_match",
            f"old_text occurs {count} times; add surrounding lines or set replace_all.",
        )
    return text.replace(change.old, change.new), count


def write_tools(workspaces: Workspaces, workers: FileWorkers, book: Revisions) -> list[Tool]:
    tools = WriteTools(workspaces, workers, book)
    return [Tool(FILE_WRITE, tools.write), Tool(FILE_EDIT, tools.edit)]


__all__ = [
    "FILE_EDIT",
    "FILE_WRITE",
    "Change",
    "check_revision",
    "edit_op",
    "replaced",
    "write_op",
    "write_tools",
]
