"""Workspace confinement: turns a path a tool was given into a real path inside the root.

A path is taken relative to the workspace root (an absolute path only if it lies inside
it), resolved with `os.path.realpath` so `..` and symlinks cannot escape, and must still
be inside the root. Protected names (`.env*`, `.git`, `.ssh`, keys, credential files; see
`protected`) are refused for reads and writes, at any depth, before and after symlinks
are followed. Writes also refuse the root itself and files with several hard links (a
hard link can make a file outside the workspace look like one inside).

This is the brain's gate: a pre-check that gives the model a good message. A check by
path can never close the race with a folder swapped for a symlink before the file is
opened, so whatever acts on a file (the tools-runner) opens it with `beneath`, which
resolves and opens in one step and follows no symlink at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether_common.errors import PathDenied

from .protected import protected_component

__all__ = ["MAX_COMPONENT_BYTES", "MAX_PATH_BYTES", "check_root", "resolve"]

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
_SYSTEM_ROOTS = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root", "/run", "/sbin"}
    | {"/sys", "/usr", "/var", "/System", "/Library", "/private/etc", "/private/var"}
)


def check_root(root: str | Path) -> Path:
    """The real path of a usable workspace root; refuses `/`, a drive, a system folder."""
    try:
        text = _validated(os.fspath(root), what="workspace root")
        real = os.path.realpath(text)
    except PathDenied:
        raise
    except Exception as exc:  # e.g. an unencodable name: refuse, never crash
        raise PathDenied(f"workspace root cannot be used: {exc}") from exc
    anchor = Path(real).anchor
    if real == anchor or real in _SYSTEM_ROOTS:
        raise PathDenied(f"{real} cannot be a workspace: it is a whole drive or a system folder")
    if not os.path.isdir(real):
        raise PathDenied(f"workspace root {real} is not an existing directory")
    hit = protected_component(Path(real).parts)
    if hit:
        raise PathDenied(f"workspace root {real} is inside the protected location {hit}")
    return Path(real)


def resolve(root: str | Path, path: str, *, write: bool) -> Path:
    """The real path of `path` inside the workspace `root`, or PathDenied saying why not."""
    try:
        return _resolve(check_root(root), path, write=write)
    except PathDenied:
        raise
    except Exception as exc:  # OS errors and odd input are refusals, never crashes
        raise PathDenied(f"{path!r} cannot be used: {exc}") from exc


def _resolve(root: Path, path: str, *, write: bool) -> Path:
    text = _validated(path, what="path")
    if text.startswith("~"):
        raise PathDenied(
            f"{text!r}: '~' (home directory) is not expanded; give a path inside the workspace"
        )
    _refuse_protected(text.split("/"), text)
    candidate = text if os.path.isabs(text) else os.path.join(root, text)
    real = _realpath(candidate, text)
    if real != root and not real.is_relative_to(root):
        raise PathDenied(f"{text!r} is outside the workspace")
    _refuse_protected(real.relative_to(root).parts, text)
    if write:
        _check_writable(root, real, text)
    return real


def _validated(path: object, *, what: str) -> str:
    if not isinstance(path, str):
        raise PathDenied(f"the {what} must be text")
    if not path.strip():
        raise PathDenied(f"the {what} is empty")
    if "\x00" in path:
        raise PathDenied(f"the {what} contains a NUL byte")
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        raise PathDenied(f"the {what} contains control characters")
    try:
        encoded = os.fsencode(path)
    except UnicodeError as exc:
        raise PathDenied(f"the {what} is not valid text for a file name") from exc
    if len(encoded) > MAX_PATH_BYTES:
        raise PathDenied(f"the {what} is longer than {MAX_PATH_BYTES} bytes")
    if any(len(part) > MAX_COMPONENT_BYTES for part in encoded.split(b"/")):
        raise PathDenied(f"a name in the {what} is longer than {MAX_COMPONENT_BYTES} bytes")
    return path


def _refuse_protected(parts: tuple[str, ...] | list[str], shown: str) -> None:
    hit = protected_component(parts)
    if hit:
        raise PathDenied(f"{shown!r} touches the protected name {hit}")


def _realpath(candidate: str, shown: str) -> Path:
    try:
        return Path(os.path.realpath(candidate, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(candidate))  # a file about to be created
    except OSError as exc:
        raise PathDenied(f"{shown!r} cannot be resolved: {exc.strerror}") from exc


def _check_writable(root: Path, real: Path, shown: str) -> None:
    if real == root:
        raise PathDenied(f"{shown!r} is the workspace root itself, which cannot be written")
    try:
        links = real.stat().st_nlink if real.is_file() else 1
    except OSError:
        links = 1
    if links > 1:
        raise PathDenied(f"{shown!r} has several hard links; writing it would change other paths")
