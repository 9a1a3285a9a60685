"""A change set from two views of the touched paths (before: the workspace; after: the
staged copy): which paths were created, modified or deleted, a bounded unified diff for
text, sizes and sha256 for binary files, each path's base digest, and the set's digest.

Pure: no I/O; a set too large for a card is refused (`too_many_changes`). The new contents are kept beside the wire model (`Staged.contents`), since
they are what an approval applies and the card shows only their digests."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tether_common.messages.staging import (
    ABSENT,
    MAX_DIFF_CHARS,
    MAX_DIFF_TOTAL,
    MAX_ENTRIES,
    TRUNCATED_MARKER,
    ChangeEntry,
    ChangeKind,
    ChangeSet,
)
from tether_tools_runner.tool import ToolFailure

NodeType = Literal["file", "dir"]


@dataclass(frozen=True, slots=True)
class Node:
    """One path as seen in a tree: a regular file (with its bytes) or a folder."""

    type: NodeType
    mode: int = 0o644
    data: bytes = b""

    @property
    def digest(self) -> str:
        return sha256(self.data) if self.type == "file" else "dir"


@dataclass(frozen=True, slots=True)
class Staged:
    """A change set and the bytes it writes (by path), as stored until it is applied."""

    changes: ChangeSet
    contents: dict[str, bytes] = field(default_factory=dict)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def base_of(node: Node | None) -> str:
    """A touched path's base: the digest an apply must find there (or `absent`)."""
    return ABSENT if node is None else node.digest


def is_text(data: bytes) -> bool:
    """Shown as a diff: valid UTF-8 without a NUL (anything else is shown by digest)."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def compare(
    tool: str,
    before: Mapping[str, Node],
    after: Mapping[str, Node],
    *,
    output: str | None = None,
) -> Staged:
    """The change set that turns `before` into `after` (paths absent from both are
    untouched). Folders count only when created or removed."""
    entries: list[ChangeEntry] = []
    contents: dict[str, bytes] = {}
    budget = MAX_DIFF_TOTAL
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old is not None and new is not None and old.type != new.type:
            # A file became a folder (or back): removing one, then making the other.
            entries.append(_entry(path, old, None, budget))
            old = None
        if old == new or (old and new and old.type == new.type == "dir"):
            continue
        entry = _entry(path, old, new, budget)
        budget -= len(entry.diff or "")
        entries.append(entry)
        if new is not None and new.type == "file":
            contents[path] = new.data
    if len(entries) > MAX_ENTRIES:
        raise ToolFailure(
            "too_many_changes", f"{len(entries)} paths change; a card shows at most {MAX_ENTRIES}."
        )
    entries.sort(key=_apply_order)
    changes = ChangeSet(
        digest=set_digest(tool, entries),
        tool=tool,
        entries=entries,
        output=output,
        truncated=any(e.diff_truncated for e in entries),
    )
    return Staged(changes, contents)


def _apply_order(entry: ChangeEntry) -> tuple[int, int, str]:
    """Removals deepest first, then creations shallowest first: a folder is emptied
    before it goes, and made before what goes in it."""
    depth = entry.path.count("/")
    if entry.change == "deleted":
        return (0, -depth, entry.path)
    return (1, depth, entry.path)


def _entry(path: str, old: Node | None, new: Node | None, budget: int) -> ChangeEntry:
    kind: ChangeKind = "created" if old is None else "deleted" if new is None else "modified"
    shown = new if new is not None else old
    assert shown is not None
    if shown.type == "dir":
        return ChangeEntry(path=path, change=kind, type="dir", base=base_of(old))
    old_data = old.data if old is not None and old.type == "file" else b""
    new_data = new.data if new is not None else b""
    text = is_text(old_data) and is_text(new_data)
    diff, cut = _diff(path, old_data, new_data, old, new, budget) if text else (None, False)
    return ChangeEntry(
        path=path,
        change=kind,
        type="text" if text else "binary",
        base=base_of(old),
        digest=None if new is None else new.digest,
        size_before=None if old is None else len(old.data),
        size_after=None if new is None else len(new.data),
        mode=None if new is None else new.mode,
        diff=diff,
        diff_truncated=cut,
    )


def _diff(
    path: str, old: bytes, new: bytes, was: Node | None, now: Node | None, budget: int
) -> tuple[str, bool]:
    lines = difflib.unified_diff(
        old.decode().splitlines(keepends=True),
        new.decode().splitlines(keepends=True),
        fromfile="/dev/null" if was is None else f"a/{path}",
        tofile="/dev/null" if now is None else f"b/{path}",
    )
    limit = max(0, min(MAX_DIFF_CHARS, budget))
    parts: list[str] = []
    size = 0
    for line in lines:
        shown = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        if size + len(shown) > limit:
            return "".join(parts) + TRUNCATED_MARKER, True
        parts.append(shown)
        size += len(shown)
    return "".join(parts), False


def set_digest(tool: str, entries: list[ChangeEntry]) -> str:
    """What an approval of the set is bound to: every path, change, base, new content
    and mode, in apply order (the diff text is derived from these, so it is left out)."""
    facts = [[e.path, e.change, e.type == "dir", e.base, e.digest, e.mode] for e in entries]
    body = json.dumps([tool, facts], separators=(",", ":"), ensure_ascii=False)
    return sha256(body.encode())


__all__ = ["Node", "NodeType", "Staged", "base_of", "compare", "is_text", "set_digest", "sha256"]
