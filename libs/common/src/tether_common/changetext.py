"""A staged change set as the lines people read: what approving applies, exactly (the
CLI's approval card and the webhook card say it in these words; the approvals console
draws the same set as HTML).

The lines hold the call's own words (paths, diffs, a command's output) as they are: the
caller makes them safe for where they go (`tether_common.display.shown`)."""

from __future__ import annotations

from tether_common.messages.staging import ChangeEntry, ChangeSet

__all__ = ["change_lines"]


def change_lines(changes: ChangeSet) -> list[str]:
    """The change set: a heading (how many, the digest approving seals), then each path
    with its diff indented under it, then what a staged command said."""
    lines = [
        f"── approving applies exactly these changes ({len(changes.entries)}; "
        f"digest {changes.digest[:12]})"
    ]
    for entry in changes.entries:
        lines.append(f"   {entry.change} {entry.path}{_entry_note(entry)}")
        lines += [f"     {line}" for line in (entry.diff or "").splitlines()]
    if changes.output:
        lines += [
            "   the staged command said:",
            *(f"     {x}" for x in changes.output.splitlines()),
        ]
    return lines


def _entry_note(entry: ChangeEntry) -> str:
    if entry.type == "dir":
        return " (folder)"
    if entry.type == "binary":
        before = "-" if entry.size_before is None else entry.size_before
        after = "-" if entry.size_after is None else entry.size_after
        return f" (binary, {before} → {after} bytes, sha256 {entry.digest or '-'})"
    return ""
