"""The narrowest grant entries for one tool, in the grant grammar's own terms
(`gates/grants.py`): exact tool ids and argument constraints `key=value` /
`key=in:a,b` (several entries stay separate alternatives). The grammar has no globs,
path prefixes or host patterns, so "narrowest" is built from exact values:

1. Only calls the agent needs a grant for are looked at (`suggest.py`); `wanted` are
   those that were allowed or approved, `refused` those denied (by the gates or a
   person) or left to expire.
2. Wanted calls are grouped by the set of their scalar arguments (strings, numbers,
   booleans: what a constraint can name); each group gets one entry.
3. In an entry, an argument is pinned to the exact values the group used (`in:` list)
   when they are few (at most `FEW`) and short (`SHORT` characters, one line): paths,
   names, modes. An argument with many or long values (file bodies, free text) is left
   free: that is the grammar's only way to say "any" - a prefix or a glob cannot be
   written.
4. No entry may allow a refused call: while one does, its free arguments are pinned
   too (fewest values first); if it still does (the product of the lists holds a refused
   combination), the group is split into one exact entry per call; an exact entry that
   still allows a refused call (same constrainable arguments) is dropped, and its calls
   are reported as `uncovered` rather than granting what was denied.

Every entry is checked by parsing it back with `parse_grant` and matching it with
`Grant.allows`, the gates' own code, so the text always means what was computed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tether_brain.gates.grants import parse_grant

__all__ = ["FEW", "SHORT", "ToolEntries", "entry_text", "narrowest"]

FEW = 8
SHORT = 64
# Characters left as they are in a constraint value: nothing the grammar splits on
# (`#`, `?`, `&`, `=`, `,`, `%`, white space).
_SAFE = "/._-~:@"


def _text(value: Any) -> str | None:
    """A value as a constraint compares it (`Constraint.matches`); None: not scalar."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _scalars(args: Mapping[str, Any]) -> dict[str, str]:
    return {k: t for k, v in args.items() if (t := _text(v)) is not None}


def entry_text(tool: str, pins: Mapping[str, Sequence[str]]) -> str:
    """`tool?key=in:a,b&...` with every key and value percent-encoded so that
    `parse_grant` decodes it back exactly (an `in:` list is decoded twice)."""
    parts = []
    for key in sorted(pins):
        values = sorted(set(pins[key]))
        name = quote(key, safe="")
        if len(values) == 1 and not values[0].startswith("in:"):
            parts.append(f"{name}={quote(values[0], safe=_SAFE)}")
        else:
            listed = ",".join(quote(quote(v, safe=_SAFE), safe=_SAFE) for v in values)
            parts.append(f"{name}=in:{listed}")
    return tool if not parts else f"{tool}?{'&'.join(parts)}"


def _allows_any(entry: str, calls: Sequence[Mapping[str, Any]]) -> bool:
    grant = parse_grant(entry)
    return any(grant.allows(args) for args in calls)


@dataclass(slots=True)
class ToolEntries:
    """The entries for one tool, and the wanted calls (by index) none may allow."""

    entries: list[str] = field(default_factory=list)
    uncovered: list[int] = field(default_factory=list)


def _pinnable(values: Sequence[str]) -> bool:
    return len(values) <= FEW and all(len(v) <= SHORT and "\n" not in v for v in values)


def _group_entry(
    tool: str, rows: list[dict[str, str]], refused: Sequence[Mapping[str, Any]]
) -> str | None:
    """One entry for a group of calls with the same scalar keys, or None when only exact
    entries keep the refused calls out."""
    values = {k: sorted({r[k] for r in rows}) for k in rows[0]}
    pinned = {k: v for k, v in values.items() if _pinnable(v)}
    free = sorted((k for k in values if k not in pinned), key=lambda k: len(values[k]))
    entry = entry_text(tool, pinned)
    while _allows_any(entry, refused) and free:
        key = free.pop(0)
        pinned[key] = values[key]
        entry = entry_text(tool, pinned)
    return None if _allows_any(entry, refused) else entry


def narrowest(
    tool: str, wanted: Sequence[Mapping[str, Any]], refused: Sequence[Mapping[str, Any]]
) -> ToolEntries:
    found = ToolEntries()
    groups: defaultdict[tuple[str, ...], list[int]] = defaultdict(list)
    rows = [_scalars(args) for args in wanted]
    for index, row in enumerate(rows):
        groups[tuple(sorted(row))].append(index)
    for members in groups.values():
        entry = _group_entry(tool, [rows[i] for i in members], refused)
        if entry is not None:
            found.entries.append(entry)
            continue
        for index in members:  # one exact entry per call
            exact = entry_text(tool, {k: [v] for k, v in rows[index].items()})
            if _allows_any(exact, refused):
                found.uncovered.append(index)
            elif exact not in found.entries:
                found.entries.append(exact)
    return found
