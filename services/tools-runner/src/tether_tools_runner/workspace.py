"""The workspace as the file tools see it: a path is split lexically into names below the
root (`Workspace.parts`), and every open, listing, walk and write then happens beneath the
root's fd through `tether_common.safety.beneath` - never by a path string, so a folder
swapped for a symlink mid-call cannot lead outside.

The I/O half (`opened`, `read_file`, `walk`, `write_file`) runs where `FileWorkers`
puts it: in a worker process acting as the sandbox user when the runner is root. Those
functions take and return plain values (a `Place` names the call's folder); `guarded`
turns every failure into a `Failed` value, because an exception need not survive the
trip back from a worker. Which folder a call works in (the root, or its run tree's
folder under it) is `folders.py`'s part.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, ParamSpec, TypeVar

from tether_common.errors import PathDenied
from tether_common.safety import protected_component
from tether_common.safety.beneath import (
    MAX_DEPTH,
    open_beneath,
    open_child,
    open_parent,
    open_root,
    read_limited,
    relative_parts,
    replace_file,
)
from tether_tools_runner.tool import ToolFailure

MAX_READ_BYTES = 5_000_000

P = ParamSpec("P")
T = TypeVar("T")
Parts = tuple[str, ...]
EntryKind = Literal["dir", "file", "link", "other"]


@dataclass(frozen=True, slots=True)
class Failed:
    """A tool failure as a value: what a worker sends back instead of raising."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Entry:
    parts: Parts
    kind: EntryKind
    size: int


@dataclass(frozen=True, slots=True)
class Place:
    """Where one call's file I/O happens: beneath the workspace root, in `folder` (its run
    tree's folder) or, with none, in the root itself. Plain values: sent to workers."""

    root: str
    folder: str | None = None


@dataclass(frozen=True, slots=True)
class Workspace:
    """A call's workspace folder and how paths in it are named; no I/O (that is the
    workers' part). `root` is the folder itself; `place` how a worker reaches it."""

    root: Path
    place: Place = field(default=Place(""))

    def __post_init__(self) -> None:
        if not self.place.root:  # the shared layout: the folder is the root
            object.__setattr__(self, "place", Place(str(self.root)))

    def parts(self, path: str) -> Parts:
        try:
            return relative_parts(self.root, path)
        except PathDenied as exc:
            raise ToolFailure("path_denied", exc.message) from None

    @staticmethod
    def shown(parts: Parts) -> str:
        """The path as the model should write it: relative to the workspace."""
        return "/".join(parts) or "."


def shown(parts: Parts) -> str:
    return Workspace.shown(parts)


_ROOTS: dict[str, int] = {}


def root_fd(root: str) -> int:
    """This process's fd for the workspace root, opened once. A worker opens it before it
    drops to the sandbox user, who may not be able to reach the root by its path."""
    fd = _ROOTS.get(root)
    if fd is None:
        fd = _ROOTS[root] = open_root(root)
    return fd


@contextlib.contextmanager
def opened(place: Place) -> Iterator[int]:
    """The fd of the call's folder: the root's own (kept open), or its run tree's folder
    opened beneath it by fd, refusing a symlink, for the length of the call."""
    top = root_fd(place.root)
    if place.folder is None:
        yield top
        return
    fd = open_beneath(top, (place.folder,), kind="dir")
    try:
        yield fd
    finally:
        os.close(fd)


def read_file(place: Place, parts: Parts, *, limit: int = MAX_READ_BYTES) -> bytes:
    with opened(place) as base:
        fd = open_beneath(base, parts, kind="file")
    try:
        return _read_capped(fd, parts, limit)
    finally:
        os.close(fd)


def read_child(dir_fd: int, name: str, parts: Parts, *, limit: int = MAX_READ_BYTES) -> bytes:
    fd = open_child(dir_fd, name, kind="file", shown=parts)
    try:
        return _read_capped(fd, parts, limit)
    finally:
        os.close(fd)


def _read_capped(fd: int, parts: Parts, limit: int) -> bytes:
    data = read_limited(fd, limit)
    if len(data) > limit:
        raise ToolFailure("too_large", f"{shown(parts)} is larger than {limit} bytes.")
    return data


def decode_text(data: bytes, parts: Parts) -> str:
    if b"\x00" in data[:8192]:
        raise ToolFailure("binary_file", f"{shown(parts)} looks binary; not read.")
    return data.decode("utf-8", errors="replace")


def write_file(place: Place, parts: Parts, data: bytes) -> bool:
    """Replace or create the file (and its missing folders); True when it existed."""
    with opened(place) as base:
        dir_fd, name = open_parent(base, parts, create=True)
    try:
        return replace_file(dir_fd, name, data)
    finally:
        os.close(dir_fd)


def excluded(parts: Parts, excludes: tuple[str, ...]) -> bool:
    """Skipped by walks: a protected name (alone, or as a pair such as .docker/config.json)
    or a name matching one of the caller's patterns."""
    name = parts[-1]
    if protected_component(parts[-2:]) is not None:
        return True
    return any(fnmatch.fnmatch(name, pat) for pat in excludes)


def walk(
    dir_fd: int, prefix: Parts, *, recursive: bool, excludes: tuple[str, ...], depth: int = 0
) -> Iterator[tuple[int, Entry]]:
    """Entries under `dir_fd` (sorted by name), each with the fd of its folder, valid until
    the next step. Sub-folders are entered by fd, never by path; a symlink is reported as
    a link, never followed."""
    try:
        with os.scandir(dir_fd) as listing:
            names = sorted(entry.name for entry in listing)
    except OSError:
        return
    for name in names:
        if excluded((*prefix, name), excludes):
            continue
        entry = _entry(dir_fd, name, (*prefix, name))
        if entry is None:
            continue
        yield dir_fd, entry
        if recursive and entry.kind == "dir" and depth < MAX_DEPTH:
            yield from _walk_into(dir_fd, entry.parts, excludes, depth + 1)


def _entry(dir_fd: int, name: str, parts: Parts) -> Entry | None:
    try:
        found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None  # gone meanwhile
    mode = found.st_mode
    kind: EntryKind = (
        "dir"
        if stat.S_ISDIR(mode)
        else "file"
        if stat.S_ISREG(mode)
        else "link"
        if stat.S_ISLNK(mode)
        else "other"
    )
    return Entry(parts, kind, found.st_size)


def _walk_into(
    dir_fd: int, parts: Parts, excludes: tuple[str, ...], depth: int
) -> Iterator[tuple[int, Entry]]:
    try:
        child = open_child(dir_fd, parts[-1], kind="dir", shown=parts)
    except (OSError, PathDenied):
        return  # swapped for a link or removed since it was listed: not entered
    try:
        yield from walk(child, parts, recursive=True, excludes=excludes, depth=depth)
    finally:
        os.close(child)


def guarded(fn: Callable[P, T]) -> Callable[P, T | Failed]:
    """Run `fn`, answering every failure as a `Failed` value (never an exception)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T | Failed:
        try:
            return fn(*args, **kwargs)
        except ToolFailure as failure:
            return Failed(failure.code, failure.message)
        except PathDenied as denied:
            return Failed(denied.code, denied.message)
        except OSError as exc:
            return _os_failure(exc)
        except Exception as exc:  # a bug must still come back as a result
            return Failed("tool_error", f"{type(exc).__name__}: {exc}.")

    return run


def _os_failure(exc: OSError) -> Failed:
    label = exc.filename if isinstance(exc.filename, str) else "the path"
    if isinstance(exc, FileNotFoundError):
        return Failed("not_found", f"{label} does not exist.")
    if isinstance(exc, NotADirectoryError):
        return Failed("not_a_directory", f"{label} (or a folder on its way) is not a folder.")
    if isinstance(exc, IsADirectoryError):
        return Failed("is_directory", f"{label} is a folder.")
    if isinstance(exc, PermissionError):
        return Failed(
            "permission_denied", f"{label}: permission denied (file tools act as the sandbox user)."
        )
    return Failed("io_error", f"{label}: {exc.strerror or exc}.")


__all__ = [
    "MAX_READ_BYTES",
    "Entry",
    "Failed",
    "Parts",
    "Place",
    "Workspace",
    "decode_text",
    "excluded",
    "guarded",
    "opened",
    "read_child",
    "read_file",
    "root_fd",
    "shown",
    "walk",
    "write_file",
]
