"""`file_read`, `file_list`, `file_search`: looking at the workspace without changing it."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether_common.messages.tools import ToolDescriptor
from tether_common.safety import protected_name
from tether_tools_runner.context import current_run_id
from tether_tools_runner.revisions import RevisionBook, revision_of
from tether_tools_runner.tool import Tool, ToolFailure
from tether_tools_runner.workspace import Workspace

MAX_LINES = 2000
MAX_LIST = 1000
MAX_MATCHES = 200
MAX_SEARCH_FILE = 1_000_000
MAX_LINE_SHOWN = 500
DEFAULT_EXCLUDES = (".git", "node_modules", "__pycache__", ".venv", "*.pyc")


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


PATH = {"type": "string", "minLength": 1, "maxLength": 4096}

FILE_READ = ToolDescriptor(
    name="file_read",
    description=(
        "Reads a text file in the workspace and returns its lines numbered from 1, plus the "
        "file's revision (sha256 of its content). Read a file before you edit it: "
        "`file_edit` refuses a file this run has not read at its current revision. `path` is "
        "relative to the workspace; `offset` is the first line (default 1) and `limit` the "
        f"number of lines (default and maximum {MAX_LINES}). Binary files, protected files "
        "(.env, .git, keys) and paths outside the workspace are refused. "
        'Example: {"path": "src/app.py", "offset": 1, "limit": 200}.'
    ),
    parameters=_schema(
        {
            "path": PATH,
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
        },
        ["path"],
    ),
    scope="read",
    reach="instance",
    effect="read",
    idempotent=True,
    aliases=["read_file", "cat", "open_file"],
    output_trust="untrusted",
)

FILE_LIST = ToolDescriptor(
    name="file_list",
    description=(
        "Lists the files and folders under a workspace folder (folders end with '/', files "
        "show their size in bytes). Use it to find out what exists before reading. `path` "
        "defaults to the workspace root; `recursive` (default false) walks sub-folders; "
        "`exclude` is a list of glob patterns matched against each name (default: .git, "
        f"node_modules, __pycache__, .venv, *.pyc). At most {MAX_LIST} entries are returned; "
        'protected names are never listed. Example: {"path": "src", "recursive": true}.'
    ),
    parameters=_schema(
        {
            "path": PATH,
            "recursive": {"type": "boolean"},
            "exclude": {"type": "array", "items": {"type": "string", "maxLength": 200}},
        },
        [],
    ),
    scope="read",
    reach="instance",
    effect="read",
    idempotent=True,
    aliases=["list_files", "ls", "list_directory"],
    output_trust="untrusted",
)

FILE_SEARCH = ToolDescriptor(
    name="file_search",
    description=(
        "Searches text files under a workspace folder for a string or a regular expression "
        "and returns matching lines as 'path:line: text'. Use it to find where something is "
        "defined or used. `pattern` is plain text unless `regex` is true (Python syntax); "
        "`path` defaults to the workspace root; `glob` limits the files searched (e.g. "
        "'*.py'); `case_sensitive` defaults to true. Binary files, files over 1 MB and "
        f"protected names are skipped; at most {MAX_MATCHES} matches are returned. "
        'Example: {"pattern": "def main", "glob": "*.py"}.'
    ),
    parameters=_schema(
        {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 500},
            "regex": {"type": "boolean"},
            "path": PATH,
            "glob": {"type": "string", "minLength": 1, "maxLength": 200},
            "case_sensitive": {"type": "boolean"},
        },
        ["pattern"],
    ),
    scope="read",
    reach="instance",
    effect="read",
    idempotent=True,
    aliases=["search_files", "grep", "find_in_files"],
    output_trust="untrusted",
)


class ReadTools:
    def __init__(self, workspace: Workspace, book: RevisionBook) -> None:
        self.workspace = workspace
        self.book = book

    async def read(self, args: dict[str, Any]) -> str:
        real = self.workspace.path(args["path"], write=False)
        text, data = await asyncio.to_thread(self.workspace.read_text, real)
        revision = revision_of(data)
        self.book.record(current_run_id.get(), str(real), revision)
        lines = text.splitlines()
        first = int(args.get("offset", 1))
        chosen = lines[first - 1 : first - 1 + int(args.get("limit", MAX_LINES))]
        last = first + len(chosen) - 1
        head = f"{self.workspace.shown(real)} (lines {first}-{last} of {len(lines)}; {revision})"
        body = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(chosen, start=first))
        return f"{head}\n{body}" if chosen else f"{head}\n(no lines in this range)"

    async def listing(self, args: dict[str, Any]) -> str:
        real = self.workspace.path(args.get("path", "."), write=False)
        if not real.is_dir():
            raise ToolFailure("not_a_directory", f"{args.get('path')} is not a folder.")
        excludes = tuple(args.get("exclude", DEFAULT_EXCLUDES))
        entries = await asyncio.to_thread(
            _listing, real, bool(args.get("recursive", False)), excludes
        )
        shown = [self._entry(p) for p in entries[:MAX_LIST]]
        more = f"\n… {len(entries) - MAX_LIST} more not shown" if len(entries) > MAX_LIST else ""
        return "\n".join(shown) + more if shown else "(empty folder)"

    def _entry(self, path: Path) -> str:
        name = self.workspace.shown(path)
        if path.is_dir() and not path.is_symlink():
            return name + "/"
        try:
            return f"{name}  {path.lstat().st_size}"
        except OSError:
            return name

    async def search(self, args: dict[str, Any]) -> str:
        real = self.workspace.path(args.get("path", "."), write=False)
        flags = 0 if args.get("case_sensitive", True) else re.IGNORECASE
        source = args["pattern"] if args.get("regex") else re.escape(args["pattern"])
        try:
            pattern = re.compile(source, flags)
        except re.error as exc:
            raise ToolFailure("bad_pattern", f"the regular expression is invalid: {exc}.") from None
        hits = await asyncio.to_thread(self._search, real, pattern, args.get("glob"))
        if not hits:
            return f"no matches for {args['pattern']!r}"
        more = f"\n(stopped at {MAX_MATCHES} matches)" if len(hits) >= MAX_MATCHES else ""
        return "\n".join(hits) + more

    def _search(self, real: Path, pattern: re.Pattern[str], glob: str | None) -> list[str]:
        files = [real] if real.is_file() else _listing(real, True, DEFAULT_EXCLUDES)
        hits: list[str] = []
        for path in files:
            if not path.is_file() or path.is_symlink() or (glob and not _glob(path, glob)):
                continue
            try:
                if path.stat().st_size > MAX_SEARCH_FILE:
                    continue
                text, _ = self.workspace.read_text(path)
            except (ToolFailure, OSError):
                continue
            for number, line in enumerate(text.splitlines(), start=1):
                if pattern.search(line):
                    shown = line[:MAX_LINE_SHOWN]
                    hits.append(f"{self.workspace.shown(path)}:{number}: {shown}")
                    if len(hits) >= MAX_MATCHES:
                        return hits
        return hits


def _glob(path: Path, pattern: str) -> bool:
    return fnmatch.fnmatch(path.name, pattern) or fnmatch.fnmatch(str(path), pattern)


def _excluded(name: str, excludes: tuple[str, ...]) -> bool:
    return protected_name(name) or any(fnmatch.fnmatch(name, pat) for pat in excludes)


def _walk(root: Path, recursive: bool, excludes: tuple[str, ...]) -> Iterator[Path]:
    try:
        children = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in children:
        if _excluded(entry.name, excludes):
            continue
        yield Path(entry.path)
        if recursive and entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), recursive, excludes)


def _listing(root: Path, recursive: bool, excludes: tuple[str, ...]) -> list[Path]:
    found: list[Path] = []
    for path in _walk(root, recursive, excludes):
        found.append(path)
        if len(found) > MAX_LIST * 10:
            break
    return found


def read_tools(workspace: Workspace, book: RevisionBook) -> list[Tool]:
    tools = ReadTools(workspace, book)
    return [
        Tool(FILE_READ, tools.read),
        Tool(FILE_LIST, tools.listing),
        Tool(FILE_SEARCH, tools.search),
    ]


__all__ = ["FILE_LIST", "FILE_READ", "FILE_SEARCH", "read_tools"]
