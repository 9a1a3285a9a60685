"""`file_write` and `file_edit`: changing the workspace, with a read-before-write check.

`file_edit` refuses unless this run read (or wrote) the file at the revision it has
now, so a model never edits a file it has not seen or that changed under it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.context import current_run_id
from tether_tools_runner.revisions import RevisionBook, revision_of
from tether_tools_runner.tool import Tool, ToolFailure
from tether_tools_runner.workspace import Workspace

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
    reach="instance",
    effect="write",
    idempotent=False,
    aliases=["write_file", "create_file", "save_file"],
    output_trust="trusted",
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
    reach="instance",
    effect="write",
    idempotent=False,
    aliases=["edit_file", "replace_in_file", "str_replace"],
    output_trust="trusted",
)


class WriteTools:
    def __init__(self, workspace: Workspace, book: RevisionBook) -> None:
        self.workspace = workspace
        self.book = book

    async def write(self, args: dict[str, Any]) -> str:
        real = self.workspace.path(args["path"], write=True)
        if real.is_dir():
            raise ToolFailure("is_directory", f"{args['path']} is a folder.")
        data = str(args["content"]).encode()
        existed = real.exists()
        await asyncio.to_thread(self.workspace.write_bytes, real, data)
        revision = revision_of(data)
        self.book.record(current_run_id.get(), str(real), revision)
        verb = "replaced" if existed else "created"
        return f"{verb} {self.workspace.shown(real)} ({len(data)} bytes; {revision})"

    async def edit(self, args: dict[str, Any]) -> str:
        real = self.workspace.path(args["path"], write=True)
        _, data = await asyncio.to_thread(self.workspace.read_text, real)
        self._check_revision(real, revision_of(data))
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ToolFailure(
                "not_utf8", "the file is not UTF-8 text; file_write it whole."
            ) from None
        old, new = str(args["old_text"]), str(args["new_text"])
        count = text.count(old)
        if count == 0:
            raise ToolFailure(
                "no_match", "old_text does not occur in the file; read it again and copy exactly."
            )
        if count > 1 and not args.get("replace_all", False):
            raise ToolFailure(
                "ambiguous_match",
                f"old_text occurs {count} times; add surrounding lines or set replace_all.",
            )
        updated = text.replace(old, new).encode()
        await asyncio.to_thread(self.workspace.write_bytes, real, updated)
        revision = revision_of(updated)
        self.book.record(current_run_id.get(), str(real), revision)
        return f"edited {self.workspace.shown(real)}: {count} replacement(s) ({revision})"

    def _check_revision(self, real: Path, current: str) -> None:
        seen = self.book.seen(current_run_id.get(), str(real))
        shown = self.workspace.shown(real)
        if seen is None:
            raise ToolFailure("not_read", f"{shown} was not read in this run; file_read it first.")
        if seen != current:
            raise ToolFailure(
                "stale_revision",
                f"{shown} changed since this run read it ({seen} → {current}); read it again.",
            )


def write_tools(workspace: Workspace, book: RevisionBook) -> list[Tool]:
    tools = WriteTools(workspace, book)
    return [Tool(FILE_WRITE, tools.write), Tool(FILE_EDIT, tools.edit)]


__all__ = ["FILE_EDIT", "FILE_WRITE", "write_tools"]
