"""Secrets kept in files (TETHER_HOME: the operator token, the database password, the
decision key, the NATS configuration and client password): readable by their owner only
from the moment they exist.

A secret file is never created with the default mode and narrowed afterwards (someone
could open it in between): its content is written to a fresh `O_CREAT | O_EXCL` file of
mode 0600 beside it, which is then linked (create once) or renamed (replace) into place,
so a reader sees the whole secret or none. Symbolic links are refused, so a planted link
cannot redirect a write or a read. Files written by older versions with wider modes are
narrowed when they are next read.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from tether_common.errors import ConfigError, ErrorCode

SECRET_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) if missing; an existing folder keeps its mode."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    return path


def _staged(path: Path, text: str) -> Path:
    """The secret in a new file of mode 0600 beside `path` (never seen half-written there)."""
    staged = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(staged, flags, SECRET_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def write_secret(path: Path, text: str) -> Path:
    """Write (or replace) a secret file, mode 0600 from the start."""
    private_dir(path.parent)
    staged = _staged(path, text)
    try:
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return path


def _check(path: Path) -> None:
    """Refuse a link or a non-file; narrow a secret an older version left readable."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            f"{path} should be a regular file holding a secret", code=ErrorCode.SECRET_FILE
        )
    if info.st_mode & 0o077:
        os.chmod(path, SECRET_MODE, follow_symlinks=False)


def read_secret(path: Path) -> str:
    _check(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as handle:
        return handle.read().strip()


def secret_in(path: Path, make: Callable[[], str]) -> tuple[str, bool]:
    """The secret kept at `path`, made and kept there first if missing; True when it was
    made now. Two processes racing here agree: the second reads what the first linked."""
    if os.path.lexists(path):
        return read_secret(path), False
    private_dir(path.parent)
    staged = _staged(path, make())
    try:
        os.link(staged, path)  # fails if it exists: create-once, whole content
    except FileExistsError:
        return read_secret(path), False
    finally:
        staged.unlink(missing_ok=True)
    return read_secret(path), True


def narrow(paths: list[Path]) -> None:
    """Narrow the modes of secret files that exist (at start, for files of older versions)."""
    for path in paths:
        if os.path.lexists(path):
            _check(path)
