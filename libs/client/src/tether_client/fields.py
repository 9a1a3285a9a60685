"""Field selection for the `-o` formats: `-o json=run_id,status`, `-o jsonl=seq,kind`,
`-o value=run_id` (kubectl's `-o jsonpath=`, gcloud's `--format=value(...)`, at our size).

A path is keys joined by dots (`usage.steps`); a segment of digits indexes a list
(`steps.0.tool`). Paths are applied to each record: each item of a list, each event of a
stream, else the one object shown. JSON, JSON Lines and YAML show a selected record as an
object keyed by the paths as written (`{"run_id": …, "usage.steps": …}`), a path that
leads nowhere as `null`; `value` prints the values alone, tab-separated, one record a
line (text as is, anything else as compact JSON, nothing for a missing one) — for
`for id in $(tether runs list -o value=run_id)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_PATHS",
    "PATH",
    "SELECTED",
    "Selection",
    "parse_selection",
    "pick",
    "records",
    "select",
]

PATH = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
MAX_PATHS = 32

# The fields the running command's `-o FORMAT=PATH,…` selected ((): all). Set while its
# options are parsed (`console.parse_output`: every command that shows data takes `-o`,
# its default included), read by `console.emit`, so one option selects for every format,
# listings and streams alike; `cli.main` clears it before each command.
SELECTED: ContextVar[tuple[str, ...]] = ContextVar("tether_output_fields", default=())


@dataclass(frozen=True, slots=True)
class Selection:
    """What `-o FORMAT=PATH,…` asked for: the format's name and the paths (none: all)."""

    format: str
    paths: tuple[str, ...] = ()


def parse_selection(text: str) -> Selection:
    """`FORMAT` or `FORMAT=PATH[,PATH…]`; a bad path raises `ValueError` saying why."""
    name, eq, rest = text.partition("=")
    if not eq:
        return Selection(name.strip().lower())
    paths = tuple(p.strip() for p in rest.split(","))
    if not any(paths):
        raise ValueError(f"no field after '{name}=': name one, e.g. {name}=run_id")
    if len(paths) > MAX_PATHS:
        raise ValueError(f"at most {MAX_PATHS} fields")
    for path in paths:
        if not PATH.fullmatch(path):
            raise ValueError(
                f"{path!r} is not a field path: keys joined by dots, e.g. usage.steps or "
                "steps.0.tool"
            )
    return Selection(name.strip().lower(), paths)


_MISSING = object()


def pick(record: Any, path: str) -> Any:
    """The value at `path` in `record` (plain JSON-like data), or `_MISSING`."""
    here = record
    for key in path.split("."):
        if isinstance(here, Mapping) and key in here:
            here = here[key]
        elif isinstance(here, Sequence) and not isinstance(here, str) and key.isdigit():
            index = int(key)
            if index >= len(here):
                return _MISSING
            here = here[index]
        else:
            return _MISSING
    return here


def select(record: Any, paths: Sequence[str]) -> dict[str, Any]:
    """`record` reduced to `paths`, keyed by each path as written; missing: None."""
    found = {path: pick(record, path) for path in paths}
    return {path: None if value is _MISSING else value for path, value in found.items()}


def records(data: Any) -> list[Any]:
    """The records a format's selection applies to: a list's items, else `data` itself."""
    return list(data) if isinstance(data, list | tuple) else [data]
