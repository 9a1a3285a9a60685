"""Opening a path beneath a workspace root in one race-free step, and changing files there
only through directory fds.

`paths.resolve` checks a path with `realpath`; anything opened by name afterwards can have
been swapped for a symlink in between. Here a path never travels as a string past the
root: it is split lexically (`relative_parts`), then opened relative to the root's fd
either by the kernel in one call (`openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, probed once) or, where the kernel lacks it, one
name at a time from a directory fd with O_NOFOLLOW. Either way what was opened is checked
with `fstat` (its type, and the root's device). A symbolic link anywhere in the path is
refused, never followed; `..` is resolved lexically and may not climb above the root.
Files are replaced by a temporary file made with O_EXCL | O_NOFOLLOW in the parent's fd and
renamed over the name within that same fd, so a folder swapped mid-call changes nothing
outside.

Refusals raise `PathDenied`; ordinary conditions raise the usual `OSError` subclasses
(`FileNotFoundError`, `NotADirectoryError`, `IsADirectoryError`). Every fd returned is the
caller's to close. Linux only (O_NOFOLLOW, `dir_fd`); never does any policy beyond that.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Literal

from tether_common.errors import ErrorCode, PathDenied

from .paths import _validated, check_root
from .protected import protected_component

__all__ = [
    "Kind",
    "open_beneath",
    "open_child",
    "open_parent",
    "open_root",
    "openat2_available",
    "place_file",
    "read_limited",
    "relative_parts",
    "replace_file",
]

Kind = Literal["file", "dir"]

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (new syscalls share one table)
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
_EAGAIN_TRIES = 16  # openat2 answers EAGAIN when a rename raced it; the kernel asks us to retry

_CLOEXEC = os.O_CLOEXEC | os.O_NOFOLLOW
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
# O_NONBLOCK: a fifo must not hang the opener; O_NOCTTY: a terminal must not become ours.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
MAX_DEPTH = 64


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def relative_parts(root: str | Path, path: str) -> tuple[str, ...]:
    """The names of `path` below `root`, lexically: `.` dropped, `..` applied (never above
    the root), an absolute path accepted only when it starts with the root. Protected names
    are refused at any depth. No file system access but the root's `realpath`."""
    text = _validated(path, what="path")
    if text.startswith("~"):
        raise PathDenied(
            f"{text!r}: '~' (home directory) is not expanded; give a path inside the workspace"
        )
    if os.path.isabs(text):
        text = _strip_root(root, text)
    parts: list[str] = []
    for name in text.split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            if not parts:
                raise PathDenied(f"{path!r} is outside the workspace")
            parts.pop()
            continue
        parts.append(name)
    hit = protected_component(parts)
    if hit:
        raise PathDenied(f"{path!r} touches the protected name {hit}")
    return tuple(parts)


def _strip_root(root: str | Path, text: str) -> str:
    normal = os.path.normpath(text)
    for prefix in {os.path.normpath(os.fspath(root)), os.path.realpath(root)}:
        if normal == prefix:
            return "."
        if normal.startswith(prefix.rstrip("/") + "/"):
            return normal[len(prefix.rstrip("/")) + 1 :]
    raise PathDenied(f"{text!r} is outside the workspace")


def open_root(root: str | Path) -> int:
    """An fd for the workspace root (which is trusted configuration, so it may be an alias)."""
    return os.open(check_root(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_beneath(root_fd: int, parts: Sequence[str], *, kind: Kind) -> int:
    """Open `parts` below the directory `root_fd` without following any symlink."""
    names = _checked(parts)
    if not names:
        return _verified(os.dup(root_fd), root_fd, kind, ".")
    flags = _DIR_FLAGS if kind == "dir" else _FILE_FLAGS
    if openat2_available():
        fd = _openat2_beneath(root_fd, names, flags)
        return _verified(fd, root_fd, kind, "/".join(names))
    current = root_fd
    try:
        for index, name in enumerate(names):
            last = index == len(names) - 1
            child = open_child(
                current, name, kind=kind if last else "dir", shown=names[: index + 1]
            )
            if current != root_fd:
                os.close(current)
            current = child
        return current
    except BaseException:
        if current != root_fd:
            os.close(current)
        raise


def open_child(dir_fd: int, name: str, *, kind: Kind, shown: Sequence[str] | None = None) -> int:
    """Open one name in `dir_fd` (never a symlink), checked to be a `kind` on the same device."""
    label = "/".join(shown) if shown else name
    _checked([name])  # one plain name: never `..`, never a path, never a secret
    flags = _DIR_FLAGS if kind == "dir" else _FILE_FLAGS
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise _explained(exc, dir_fd, name, label) from None
    return _verified(fd, dir_fd, kind, label)


def open_parent(root_fd: int, parts: Sequence[str], *, create: bool) -> tuple[int, str]:
    """The folder that holds `parts` (made, one `mkdirat` at a time, when `create`) and the
    last name. The root itself has no parent here: it can never be written."""
    names = _checked(parts)
    if not names:
        raise PathDenied("the workspace root itself cannot be written")
    if not create:
        return open_beneath(root_fd, names[:-1], kind="dir"), names[-1]
    current = os.dup(root_fd)
    try:
        for index, name in enumerate(names[:-1]):
            child = _make_child_dir(current, name, names[: index + 1])
            os.close(current)
            current = child
        return current, names[-1]
    except BaseException:
        os.close(current)
        raise


def _make_child_dir(dir_fd: int, name: str, shown: Sequence[str]) -> int:
    with contextlib.suppress(FileExistsError):  # made meanwhile: opened (and checked) below
        os.mkdir(name, 0o755, dir_fd=dir_fd)  # mkdirat never follows a symlink at `name`
    return open_child(dir_fd, name, kind="dir", shown=shown)


def replace_file(dir_fd: int, name: str, data: bytes) -> bool:
    """Write `name` in `dir_fd` atomically; True when it replaced an existing file.

    A symlink, a folder, a special file or a file with several hard links at `name` is
    refused. The rename happens within `dir_fd`, so whatever `name` became meanwhile only
    that entry of this folder is replaced."""
    existing = _lstat_child(dir_fd, name)
    if existing is not None:
        _check_replaceable(existing, name)
    # Permission bits survive (a script stays executable); set-id and sticky bits do not.
    mode = stat.S_IMODE(existing.st_mode) & 0o777 if existing is not None else 0o644
    temp = f".tether-{secrets.token_hex(8)}.tmp"  # short: any name of 255 bytes still fits
    fd = os.open(temp, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    return existing is not None


def place_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Create `name` in `dir_fd` with `data`, only if nothing is there: a temporary file
    made with O_EXCL is hard-linked to `name` (`linkat` never replaces; FileExistsError if
    anything, a symlink included, took the name meanwhile), then unlinked."""
    _checked([name])
    temp = f".tether-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode & 0o777)
        finally:
            os.close(fd)
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)


def read_limited(fd: int, limit: int) -> bytes:
    """At most `limit + 1` bytes from `fd`, so a caller can tell "more than limit"."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _checked(parts: Sequence[str]) -> list[str]:
    """Parts as `relative_parts` makes them; re-checked because callers may be far away."""
    names = list(parts)
    for name in names:
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\x00" in name:
            raise PathDenied(f"{name!r} is not a single name inside the workspace")
    hit = protected_component(names)
    if hit:
        raise PathDenied(f"{'/'.join(names)!r} touches the protected name {hit}")
    return names


def _verified(fd: int, anchor_fd: int, kind: Kind, label: str) -> int:
    """Keep `fd` only if it is a `kind` on the anchor's device; close it otherwise."""
    try:
        found = os.fstat(fd)
        if found.st_dev != os.fstat(anchor_fd).st_dev:
            raise PathDenied(f"{label!r} is on another file system (a mount inside the workspace)")
        if kind == "dir" and not stat.S_ISDIR(found.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", label)
        if kind == "file" and stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", label)
        if kind == "file" and not stat.S_ISREG(found.st_mode):
            raise PathDenied(
                f"{label!r} is not a regular file (a fifo, socket or device)",
                code=ErrorCode.NOT_A_FILE,
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _explained(exc: OSError, dir_fd: int, name: str, label: str) -> OSError | PathDenied:
    """Turn an open failure into a refusal when a symlink (or a mount) was in the way."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        found = _lstat_child(dir_fd, name)
        if exc.errno == errno.ELOOP or (found is not None and stat.S_ISLNK(found.st_mode)):
            return _symlink_refusal(label)
        if exc.errno == errno.EXDEV:
            return PathDenied(f"{label!r} crosses a mount or leaves the workspace")
    exc.filename = label
    return exc


def _symlink_refusal(label: str) -> PathDenied:
    return PathDenied(
        f"{label!r} is or passes through a symbolic link; file tools never follow links "
        "(use the path the link points to)"
    )


def _lstat_child(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _check_replaceable(existing: os.stat_result, name: str) -> None:
    if stat.S_ISLNK(existing.st_mode):
        raise _symlink_refusal(name)
    if stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", name)
    if not stat.S_ISREG(existing.st_mode):
        raise PathDenied(f"{name!r} is not a regular file", code=ErrorCode.NOT_A_FILE)
    if existing.st_nlink > 1:
        raise PathDenied(f"{name!r} has several hard links; writing it would change other paths")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _openat2_beneath(root_fd: int, names: Sequence[str], flags: int) -> int:
    how = _OpenHow(flags=flags, mode=0, resolve=_RESOLVE)
    path = os.fsencode("/".join(names))
    for _ in range(_EAGAIN_TRIES):
        fd = _openat2(root_fd, path, how)
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    exc = OSError(code, os.strerror(code), "/".join(names))
    raise _explained_path(exc, root_fd, names) from None


def _explained_path(exc: OSError, root_fd: int, names: Sequence[str]) -> OSError | PathDenied:
    """openat2 reports a symlink as ELOOP (or, as the last name under O_DIRECTORY, ENOTDIR)
    and an escape or a mount as EXDEV."""
    label = "/".join(names)
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _ends_in_link(root_fd, names)):
        return _symlink_refusal(label)
    if exc.errno in (errno.EXDEV, errno.EAGAIN):
        return PathDenied(f"{label!r} crosses a mount or leaves the workspace")
    return exc


def _ends_in_link(root_fd: int, names: Sequence[str]) -> bool:
    """For the message only (the open already failed): is the last name a symlink?"""
    try:
        parent = open_beneath(root_fd, names[:-1], kind="dir")
    except (OSError, PathDenied):
        return False
    try:
        found = _lstat_child(parent, names[-1])
    except OSError:
        return False
    finally:
        os.close(parent)
    return found is not None and stat.S_ISLNK(found.st_mode)


def _openat2(dir_fd: int, path: bytes, how: _OpenHow) -> int:
    return int(
        _libc().syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )


@cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


@cache
def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets openat2 resolve beneath."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        probe = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = _openat2(probe, b".", _OpenHow(flags=_DIR_FLAGS, mode=0, resolve=_RESOLVE))
    except (OSError, AttributeError):
        return False
    finally:
        os.close(probe)
    if fd < 0:
        return False
    os.close(fd)
    return True
