"""The staging I/O, run as the sandbox user by `FileWorkers` (module-level functions,
plain arguments, `T | Failed` answers): the touched file's view before and after a
staged `file_write`/`file_edit`, the scratch copy of a workspace for a staged `shell`
call and its view afterwards, and applying a stored change set.

Every path is reached beneath a directory fd (`tether_common.safety.beneath`), never by
a path string. Applying checks each touched path's base digest first (nothing is
changed if one differs), then changes each path by moving what is there aside within
its folder's fd, checking what was moved is still the base, and placing the new file
with `linkat` (which never replaces): a file or symlink swapped in between is found, not
written through, and everything already applied is put back."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from tether_common.errors import PathDenied
from tether_common.safety.beneath import (
    open_beneath,
    open_child,
    open_parent,
    place_file,
    read_limited,
)
from tether_tools_runner.revisions import revision_of
from tether_tools_runner.staging.changes import Node, base_of
from tether_tools_runner.tool import ToolFailure
from tether_tools_runner.tools.files_write import Change, check_revision, replaced
from tether_tools_runner.workspace import (
    MAX_READ_BYTES,
    Parts,
    Place,
    decode_text,
    guarded,
    opened,
    walk,
)

_SCRATCH_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of a change set as the apply needs it."""

    parts: Parts
    change: str  # created | modified | deleted
    is_dir: bool
    base: str
    mode: int | None = None
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class Stale:
    """Nothing applied: these paths are no longer what was staged."""

    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tree:
    """A folder's regular files and folders (by path), its symlinks (path → target), and
    what could not be taken (a fifo, a name that is not UTF-8, the size limit)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _node_of(fd: int, limit: int = MAX_READ_BYTES) -> Node:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        return Node("dir", stat.S_IMODE(info.st_mode))
    data = read_limited(fd, limit)
    if len(data) > limit:
        raise ToolFailure("too_large", f"a touched file is larger than {limit} bytes.")
    return Node("file", stat.S_IMODE(info.st_mode) & 0o777, data)


def node_at(base_fd: int, parts: Parts, *, is_dir: bool = False) -> Node | None:
    """What `parts` holds now (None: nothing); a symlink on the way is refused."""
    try:
        fd = open_beneath(base_fd, parts, kind="dir" if is_dir else "file")
    except FileNotFoundError:
        return None
    except (IsADirectoryError, NotADirectoryError):
        return Node("dir") if not is_dir else Node("file")  # the other kind: never the base
    try:
        return _node_of(fd)
    finally:
        os.close(fd)


@guarded
def before_write(place: Place, parts: Parts) -> Node | None:
    """The file a staged `file_write` would replace (None: it would create it)."""
    with opened(place) as base:
        return node_at(base, parts)


@guarded
def before_edit(place: Place, parts: Parts, change: Change) -> tuple[Node, bytes]:
    """A staged `file_edit`: the file as it is and its text after the edit, with the same
    read-before-write and matching checks the tool makes."""
    with opened(place) as base:
        node = node_at(base, parts)
    if node is None or node.type != "file":
        raise ToolFailure("not_found", f"{'/'.join(parts)} is not a file in the workspace.")
    decode_text(node.data, parts)
    check_revision(parts, change.seen, revision_of(node.data))
    text, _count = replaced(node.data, change)
    return node, text.encode()


def _open_scratch(path: str) -> int:
    """The scratch folder, under the runner's own 0711 staging folder (nobody else can
    rename anything on the way), refusing a symlink."""
    return os.open(path, _SCRATCH_FLAGS)


Owner = tuple[int, int] | None  # who the scratch copy is given to (None: stays ours)


@guarded
def copy_into(place: Place, scratch: str, limit: int, owner: Owner) -> Tree:
    """Copy the call's workspace into `scratch` (files, folders, symlinks as symlinks;
    protected names are skipped, as every walk skips them), each entry given to `owner`,
    and answer what was copied: the 'before' of a staged shell call. Stops at `limit`
    bytes. Runs in the runner itself (the sandbox user may not reach `scratch` by path),
    by directory fd only, so nothing in the workspace is followed or written."""
    tree = Tree()
    size = 0
    with opened(place) as base:
        target = _open_scratch(scratch)
        try:
            for dir_fd, entry in walk(base, (), recursive=True, excludes=()):
                shown = "/".join(entry.parts)
                if entry.kind == "other":
                    tree.problems.append(f"{shown} is a special file")
                    continue
                parent = open_beneath(target, entry.parts[:-1], kind="dir")
                try:
                    size += _copy_entry(dir_fd, parent, entry.parts, entry.kind, tree, limit - size)
                    if owner is not None:
                        os.chown(entry.parts[-1], *owner, dir_fd=parent, follow_symlinks=False)
                finally:
                    os.close(parent)
                if size > limit:
                    tree.problems.append(f"the workspace is larger than {limit} bytes")
                    return tree
        finally:
            os.close(target)
    return tree


def _copy_entry(src_dir: int, dst_dir: int, parts: Parts, kind: str, tree: Tree, room: int) -> int:
    name, shown = parts[-1], "/".join(parts)
    if kind == "link":
        target = os.readlink(name, dir_fd=src_dir)
        os.symlink(target, name, dir_fd=dst_dir)
        tree.links[shown] = target
        return 0
    if kind == "dir":
        fd = open_child(src_dir, name, kind="dir", shown=parts)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
        os.mkdir(name, mode | 0o700, dir_fd=dst_dir)
        tree.nodes[shown] = Node("dir", mode)
        return 0
    fd = open_child(src_dir, name, kind="file", shown=parts)
    try:
        node = _node_of(fd, limit=max(room, 0))
    except ToolFailure:
        return room + 1
    finally:
        os.close(fd)
    place_file(dst_dir, name, node.data, node.mode)
    tree.nodes[shown] = node
    return len(node.data)


@guarded
def scan(scratch: str, limit: int) -> Tree:
    """The scratch folder after the staged command (whose processes are all gone): the
    'after' of a shell call, read by directory fd, never following a link."""
    tree = Tree()
    size = 0
    top = _open_scratch(scratch)
    try:
        for dir_fd, entry in walk(top, (), recursive=True, excludes=()):
            shown = "/".join(entry.parts)
            if not _plain(shown):
                tree.problems.append("a name that is not UTF-8 text")
                continue
            if entry.kind == "link":
                tree.links[shown] = os.readlink(entry.parts[-1], dir_fd=dir_fd)
            elif entry.kind == "other":
                tree.problems.append(f"{shown} is a special file")
            elif entry.kind == "dir":
                tree.nodes[shown] = node_at(top, entry.parts, is_dir=True) or Node("dir")
            else:
                node = node_at(top, entry.parts)
                if node is not None:
                    tree.nodes[shown] = node
                    size += len(node.data)
            if size > limit:
                tree.problems.append(f"the command left more than {limit} bytes")
                break
    finally:
        os.close(top)
    return tree


def _plain(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@guarded
def apply_steps(place: Place, steps: list[Step]) -> int | Stale:
    """Apply a change set exactly, or nothing of it (see the module docstring)."""
    with opened(place) as base:
        stale = [s for s in steps if _base_now(base, s) != s.base]
        if stale:
            return Stale(tuple("/".join(s.parts) for s in stale))
        undo = _Undo()
        try:
            for step in steps:
                if not _apply_one(base, step, undo):
                    undo.roll_back()
                    return Stale(("/".join(step.parts),))
        except BaseException:
            undo.roll_back()
            raise
        undo.commit()
    return len(steps)


def _base_now(base: int, step: Step) -> str:
    try:
        return base_of(node_at(base, step.parts, is_dir=step.is_dir))
    except PathDenied:
        return "symlink"  # a link swapped in on the way: never the staged base


class _Undo:
    """What an apply did so far, as steps to take back (last first) if a later path turns
    out stale, and the moved-aside originals to remove once all of it stands."""

    def __init__(self) -> None:
        self.steps: list[Callable[[], None]] = []
        self.aside: list[tuple[int, str]] = []  # dir fd, moved-aside name
        self.fds: list[int] = []

    def hold(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def roll_back(self) -> None:
        for step in reversed(self.steps):
            with contextlib.suppress(OSError):
                step()
        self._close()

    def commit(self) -> None:
        for dir_fd, aside in self.aside:
            with contextlib.suppress(OSError):
                os.unlink(aside, dir_fd=dir_fd)
        self._close()

    def _close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _put_back(dir_fd: int, aside: str, name: str) -> None:
    """Restore a moved-aside file under its name unless something took the name since
    (then it stays under its aside name: nothing is overwritten)."""
    os.link(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    os.unlink(aside, dir_fd=dir_fd)


def _apply_one(base: int, step: Step, undo: _Undo) -> bool:
    """One path; False when what is there is not the staged base any more."""
    dir_fd, name = open_parent(base, step.parts, create=step.change != "deleted")
    undo.hold(dir_fd)
    if step.is_dir:
        return _apply_dir(dir_fd, name, step, undo)
    if step.change != "created":
        moved = _move_aside(dir_fd, name, step, undo)
        if moved is None:
            return False
        if step.change == "deleted":
            # Removed now (its folder may go next); kept in memory to be made again.
            os.unlink(moved.aside, dir_fd=dir_fd)
            undo.steps.append(lambda: place_file(dir_fd, name, moved.data, moved.mode))
            return True
        undo.aside.append((dir_fd, moved.aside))
    assert step.data is not None
    try:
        place_file(dir_fd, name, step.data, step.mode if step.mode is not None else 0o644)
    except FileExistsError:
        return False  # made meanwhile by someone else: not ours to replace
    undo.steps.append(lambda: os.unlink(name, dir_fd=dir_fd))
    return True


def _apply_dir(dir_fd: int, name: str, step: Step, undo: _Undo) -> bool:
    if step.change == "created":
        try:
            os.mkdir(name, (step.mode or 0o755) & 0o777, dir_fd=dir_fd)
        except FileExistsError:
            found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            return stat.S_ISDIR(found.st_mode)  # made meanwhile (e.g. by a file's parent)
        undo.steps.append(lambda: os.rmdir(name, dir_fd=dir_fd))
        return True
    try:
        os.rmdir(name, dir_fd=dir_fd)  # never follows a symlink; refuses a non-empty folder
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.ENOENT):
            return False
        raise
    undo.steps.append(lambda: os.mkdir(name, 0o755, dir_fd=dir_fd))
    return True


@dataclass(frozen=True, slots=True)
class _Moved:
    aside: str
    data: bytes
    mode: int


def _move_aside(dir_fd: int, name: str, step: Step, undo: _Undo) -> _Moved | None:
    """Rename the current entry away (the rename moves a symlink itself, never its
    target) and check that what was moved is the staged base; None when it is not (it
    is put back with the rest)."""
    aside = f".tether-{secrets.token_hex(8)}.old"
    try:
        os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    undo.steps.append(lambda: _put_back(dir_fd, aside, name))
    try:
        fd = open_child(dir_fd, aside, kind="file")
    except (OSError, PathDenied):
        return None  # a symlink, a folder or a special file now
    try:
        found = _node_of(fd)
    finally:
        os.close(fd)
    if found.digest != step.base:
        return None
    return _Moved(aside, found.data, found.mode)


__all__ = [
    "Owner",
    "Stale",
    "Step",
    "Tree",
    "apply_steps",
    "before_edit",
    "before_write",
    "copy_into",
    "node_at",
    "scan",
]
