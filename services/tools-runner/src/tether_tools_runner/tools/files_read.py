"""`file_read`, `file_list`, `file_search`: looking at the workspace without changing it.

The module-level `*_op` functions are the I/O, run as the sandbox user by `FileWorkers`
(in a worker process when the runner is root): plain arguments in, plain values out."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Any

from tether_common.errors import PathDenied
from tether_common.messages.tools import ToolDescriptor
from tether_common.patterns import PatternProblem, UserPattern
from tether_common.patterns import compile_pattern as compile_user_pattern
from tether_common.safety.beneath import open_beneath, open_parent
from tether_tools_runner.context import current_run_id
from tether_tools_runner.file_workers import FileWorkers
from tether_tools_runner.folders import WORKSPACE_REACH, Workspaces
from tether_tools_runner.revisions import Revisions, revision_of
from tether_tools_runner.tool import Tool, ToolFailure
from tether_tools_runner.workspace import (
    Entry,
    Parts,
    Place,
    decode_text,
    guarded,
    opened,
    read_child,
    read_file,
    shown,
    walk,
)

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
    reach=WORKSPACE_REACH,
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
    reach=WORKSPACE_REACH,
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
        "defined or used. `pattern` is plain text unless `regex` is true (RE2 syntax: no "
        "backreferences or lookaround); "
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
    reach=WORKSPACE_REACH,
    effect="read",
    idempotent=True,
    aliases=["search_files", "grep", "find_in_files"],
    output_trust="untrusted",
)


class ReadTools:
    def __init__(self, workspaces: Workspaces, workers: FileWorkers, book: Revisions) -> None:
        self.workspaces = workspaces
        self.workers = workers
        self.book = book

    async def read(self, args: dict[str, Any]) -> str:
        workspace = self.workspaces.current()
        parts = workspace.parts(args["path"])
        data = await self.workers.run(read_op, workspace.place, parts)
        text = decode_text(data, parts)
        revision = revision_of(data)
        await self.book.record(current_run_id.get(), shown(parts), revision)
        lines = text.splitlines()
        first = int(args.get("offset", 1))
        chosen = lines[first - 1 : first - 1 + int(args.get("limit", MAX_LINES))]
        last = first + len(chosen) - 1
        head = f"{shown(parts)} (lines {first}-{last} of {len(lines)}; {revision})"
        body = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(chosen, start=first))
        return f"{head}\n{body}" if chosen else f"{head}\n(no lines in this range)"

    async def listing(self, args: dict[str, Any]) -> str:
        workspace = self.workspaces.current()
        parts = workspace.parts(args.get("path", "."))
        excludes = tuple(args.get("exclude", DEFAULT_EXCLUDES))
        recursive = bool(args.get("recursive", False))
        entries = await self.workers.run(list_op, workspace.place, parts, recursive, excludes)
        lines = [_entry_line(entry) for entry in entries[:MAX_LIST]]
        more = f"\n… {len(entries) - MAX_LIST} more not shown" if len(entries) > MAX_LIST else ""
        return "\n".join(lines) + more if lines else "(empty folder)"

    async def search(self, args: dict[str, Any]) -> str:
        workspace = self.workspaces.current()
        parts = workspace.parts(args.get("path", "."))
        hits = await self.workers.run(
            search_op,
            workspace.place,
            parts,
            SearchQuery(
                pattern=args["pattern"],
                regex=bool(args.get("regex", False)),
                case_sensitive=bool(args.get("case_sensitive", True)),
                glob=args.get("glob"),
            ),
        )
        if not hits:
            return f"no matches for {args['pattern']!r}"
        more = f"\n(stopped at {MAX_MATCHES} matches)" if len(hits) >= MAX_MATCHES else ""
        return "\n".join(hits) + more


def _entry_line(entry: Entry) -> str:
    name = shown(entry.parts)
    return name + "/" if entry.kind == "dir" else f"{name}  {entry.size}"


@dataclass(frozen=True, slots=True)
class SearchQuery:
    pattern: str
    regex: bool
    case_sensitive: bool
    glob: str | None


def compile_pattern(query: SearchQuery) -> UserPattern:
    """The model's pattern as a linear-time matcher (RE2), or `invalid_pattern`."""
    pattern = compile_user_pattern(
        query.pattern, literal=not query.regex, ignore_case=not query.case_sensitive
    )
    if isinstance(pattern, PatternProblem):
        raise ToolFailure(pattern.code, pattern.message)
    return pattern


@guarded
def read_op(place: Place, parts: Parts) -> bytes:
    return read_file(place, parts)


@guarded
def list_op(place: Place, parts: Parts, recursive: bool, excludes: tuple[str, ...]) -> list[Entry]:
    with opened(place) as base:
        fd = open_beneath(base, parts, kind="dir")
    try:
        found: list[Entry] = []
        for _, entry in walk(fd, parts, recursive=recursive, excludes=excludes):
            found.append(entry)
            if len(found) > MAX_LIST * 10:
                break
        return found
    finally:
        os.close(fd)


@guarded
def search_op(place: Place, parts: Parts, query: SearchQuery) -> list[str]:
    pattern = compile_pattern(query)
    with opened(place) as top:
        try:
            fd = open_beneath(top, parts, kind="dir")
        except NotADirectoryError:
            return _search_file(top, parts, pattern)
    try:
        hits: list[str] = []
        for dir_fd, entry in walk(fd, parts, recursive=True, excludes=DEFAULT_EXCLUDES):
            if entry.kind != "file" or entry.size > MAX_SEARCH_FILE:
                continue
            if query.glob and not _glob(entry.parts, query.glob):
                continue
            hits += _matches(dir_fd, entry.parts, pattern, limit=MAX_MATCHES - len(hits))
            if len(hits) >= MAX_MATCHES:
                break
        return hits
    finally:
        os.close(fd)


def _search_file(top: int, parts: Parts, pattern: UserPattern) -> list[str]:
    dir_fd, _ = open_parent(top, parts, create=False)
    try:
        return _matches(dir_fd, parts, pattern, limit=MAX_MATCHES)
    finally:
        os.close(dir_fd)


def _matches(dir_fd: int, parts: Parts, pattern: UserPattern, *, limit: int) -> list[str]:
    """Matching lines of one file in `dir_fd`; a file that cannot be read is skipped."""
    try:
        data = read_child(dir_fd, parts[-1], parts, limit=MAX_SEARCH_FILE)
        text = decode_text(data, parts)
    except (ToolFailure, OSError, PathDenied):
        return []
    hits: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.search(line):
            hits.append(f"{shown(parts)}:{number}: {line[:MAX_LINE_SHOWN]}")
            if len(hits) >= limit:
                break
    return hits


def _glob(parts: Parts, pattern: str) -> bool:
    return fnmatch.fnmatch(parts[-1], pattern) or fnmatch.fnmatch("/".join(parts), pattern)


def read_tools(workspaces: Workspaces, workers: FileWorkers, book: Revisions) -> list[Tool]:
    tools = ReadTools(workspaces, workers, book)
    return [
        Tool(FILE_READ, tools.read),
        Tool(FILE_LIST, tools.listing),
        Tool(FILE_SEARCH, tools.search),
    ]


__all__ = [
    "FILE_LIST",
    "FILE_READ",
    "FILE_SEARCH",
    "SearchQuery",
    "compile_pattern",
    "list_op",
    "read_op",
    "read_tools",
    "search_op",
]
