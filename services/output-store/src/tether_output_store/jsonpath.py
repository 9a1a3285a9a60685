"""A small JSON path: `$.a.b[0]`, `a.b.0`, `$["odd key"][2]`, `items[*].name`."""

from __future__ import annotations

import re
from typing import Any

from tether_common.errors import MessageError

_TOKEN = re.compile(r"""\.?([A-Za-z_][\w-]*)|\[(\d+|\*)\]|\[["']([^"']*)["']\]|\.(\d+|\*)""")

WILDCARD = "*"


def parse_path(path: str) -> list[str | int]:
    """Steps of `path`: strings are keys, ints are indexes, "*" is every element."""
    text = path.strip()
    text = text[1:] if text.startswith("$") else text
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise MessageError(
                f"cannot read JSON path {path!r} at character {pos + 1}; "
                'use forms like "$.a.b[0]" or "a.b.0"',
                code="invalid_path",
            )
        key, index, quoted, dotted = match.groups()
        raw = key if key is not None else quoted if quoted is not None else index or dotted
        steps.append(int(raw) if raw.isdigit() and quoted is None else raw)
        pos = match.end()
    return steps


def _step(value: Any, step: str | int, where: str) -> Any:
    if isinstance(value, list) and isinstance(step, int):
        if step >= len(value):
            raise MessageError(
                f"{where}: index {step} out of range ({len(value)} items)", code="invalid_path"
            )
        return value[step]
    if isinstance(value, dict) and str(step) in value:
        return value[str(step)]
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:20])
        raise MessageError(f"{where}: no key {step!r}; keys: {keys}", code="invalid_path")
    raise MessageError(f"{where}: a {type(value).__name__} has no {step!r}", code="invalid_path")


def select_path(document: Any, path: str) -> Any:
    """The value at `path`; a wildcard step maps the rest of the path over a list."""
    value = document
    steps = parse_path(path)
    for number, step in enumerate(steps):
        where = "$" + "".join(f"[{s!r}]" for s in steps[:number])
        if step == WILDCARD:
            if not isinstance(value, list | dict):
                raise MessageError(f"{where}: '*' needs an array or object", code="invalid_path")
            items = value if isinstance(value, list) else list(value.values())
            rest = "".join(
                f"[{s!r}]" if isinstance(s, str) else f"[{s}]" for s in steps[number + 1 :]
            )
            return [select_path(item, "$" + rest) if rest else item for item in items]
        value = _step(value, step, where)
    return value
