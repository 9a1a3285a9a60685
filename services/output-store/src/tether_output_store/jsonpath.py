"""JSON path queries, by `python-jsonpath` (RFC 9535: `$.a.b[0]`, `$["odd key"]`,
`[-1]`, slices, `[*]`, `..` and filters such as `[?@.price > 10]`), plus the older
dotted index form `items.0.name`, which the retrieve tool's description still teaches.

A singular path (names and indexes only) answers the value it names, or `invalid_path`
when nothing is there; any other path answers the array of what it matched. The query
runs in a worker process (`json_worker`); here the path is only checked, so a bad one is
refused before a worker starts. Bounds: the path's length (the message model), the
document's size (`parse_cap_bytes`), the descent's depth (the library's 100 levels),
the matches and bytes shown (`select`), and the time and memory of the worker. Filter
regexes (`match`, `search`) run on RE2, never on a backtracking engine.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from jsonpath import JSONPath, JSONPathEnvironment, JSONPathError
from jsonpath.function_extensions import ExpressionType, FilterFunction
from jsonpath.selectors import IndexSelector

from tether_common.digest import member
from tether_common.errors import ErrorCode, MessageError
from tether_common.patterns import UserPattern, compile_pattern

MAX_MATCHES = 10_000
MAX_CACHED_PATTERNS = 256


class Re2Function(FilterFunction):
    """RFC 9535's `match` (the whole value) and `search` (anywhere in it) by RE2, in
    linear time, as every user-supplied pattern in Tether (`tether_common.patterns`):
    the library's own use Python's backtracking engines. An invalid pattern is false."""

    arg_types: ClassVar[list[ExpressionType]] = [ExpressionType.VALUE, ExpressionType.VALUE]
    return_type = ExpressionType.LOGICAL

    def __init__(self, *, whole: bool) -> None:
        self.whole = whole
        self._compiled: dict[str, UserPattern | None] = {}

    def __call__(self, value: object, pattern: object) -> bool:
        if not isinstance(value, str) or not isinstance(pattern, str):
            return False
        compiled = self._compile(pattern)
        return compiled is not None and compiled.search(value)

    def _compile(self, pattern: str) -> UserPattern | None:
        if pattern not in self._compiled:
            if len(self._compiled) >= MAX_CACHED_PATTERNS:
                self._compiled.clear()
            # The worker's budget bounds the query, so no per-pattern deadline here.
            found = compile_pattern(pattern, budget_s=math.inf)
            if isinstance(found, UserPattern) and self.whole:  # valid alone, then anchored
                found = compile_pattern(f"^(?:{pattern})$", budget_s=math.inf)
            self._compiled[pattern] = found if isinstance(found, UserPattern) else None
        return self._compiled[pattern]


# Non-strict: `$.m[0]` also finds the key "0" of an object, as the old `m.0` did.
ENV = JSONPathEnvironment(strict=False)
ENV.function_extensions["match"] = Re2Function(whole=True)
ENV.function_extensions["search"] = Re2Function(whole=False)

# Quoted names are left alone; `.0` after a name or `]` becomes `[0]` outside them.
_QUOTED = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'""")
_DOTTED_INDEX = re.compile(r"(?<=[\w\]])\.(\d+)(?=[.\[]|$)")


def legacy_to_rfc(path: str) -> str:
    """`items.0.name` as `items[0].name`; a path with a filter (`?`) is taken as written,
    since a filter holds numbers like `1.5`."""
    pieces = _QUOTED.split(path)
    if any("?" in piece for piece in pieces):
        return path
    quoted = _QUOTED.findall(path)
    out = [_DOTTED_INDEX.sub(r"[\1]", piece) for piece in pieces]
    return "".join(a + b for a, b in itertools.zip_longest(out, quoted, fillvalue=""))


def rooted(text: str) -> str:
    """`a.b` and `[0]` as `$.a.b` and `$[0]`: the old form let the `$` be left out."""
    if text.startswith("$"):
        return text
    return "$" + text if text.startswith(("[", ".")) else "$." + text


def compile_path(path: str) -> JSONPath:
    """The compiled query, or `invalid_path` saying what is wrong where."""
    text = rooted(legacy_to_rfc(path.strip()))
    try:
        compiled = ENV.compile(text)
    except (JSONPathError, RecursionError) as exc:
        raise MessageError(
            f"cannot read JSON path {path!r}: {first_line(exc)}; use forms like "
            '"$.a.b[0]", "$.items[-1]", "$..name" or "$.items[?@.price > 10]"',
            code=ErrorCode.INVALID_PATH,
        ) from None
    if not isinstance(compiled, JSONPath):  # a union or intersection of paths (`|`, `&`)
        raise MessageError(
            f"JSON path {path!r} combines several paths; ask for one at a time",
            code=ErrorCode.INVALID_PATH,
        )
    return compiled


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


@dataclass(frozen=True, slots=True)
class Selection:
    """What a query found, as the JSON text to show, and a note when it is partial."""

    text: str
    note: str | None


def select(document: Any, path: str, *, max_bytes: int) -> Selection:
    """Run `path` over `document`; at most `MAX_MATCHES` matches, and matches are taken
    only until `max_bytes` of them are shown (the page cuts at `max_bytes` after)."""
    compiled = compile_path(path)
    try:
        if compiled.singular_query():
            return _singular(document, compiled, path)
        return _many(document, compiled, max_bytes)
    except (JSONPathError, RecursionError) as exc:
        raise MessageError(
            f"JSON path {path!r} failed: {first_line(exc)}", code=ErrorCode.INVALID_PATH
        ) from None


def _singular(document: Any, compiled: JSONPath, path: str) -> Selection:
    found = compiled.match(document)
    if found is None:
        message = f"JSON path {path!r}: {missing(document, compiled)}"
        raise MessageError(message, code=ErrorCode.INVALID_PATH)
    return Selection(json.dumps(found.obj, indent=1), None)


def missing(document: Any, compiled: JSONPath) -> str:
    """Where a singular path stops finding anything, and what is there instead."""
    value, where = document, "$"
    for segment in compiled.segments:
        selector = segment.selectors[0]
        step = selector.index if isinstance(selector, IndexSelector) else selector.name  # type: ignore[attr-defined]
        if isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value):
            value, where = value[step], f"{where}[{step}]"
        elif isinstance(value, dict) and str(step) in value:
            value, where = value[str(step)], where + member(str(step))
        elif isinstance(value, dict):
            keys = ", ".join(list(value)[:20])
            return f"{where} has no key {str(step)!r}; keys: {keys}"
        elif isinstance(value, list):
            return f"{where} has no index {step!r} ({len(value)} items)"
        else:
            return f"{where} is a {type(value).__name__}; it has no {step!r}"
    return f"nothing at {where}"


def _many(document: Any, compiled: JSONPath, max_bytes: int) -> Selection:
    values: list[Any] = []
    size, more = 0, False
    for match in compiled.finditer(document):
        if len(values) >= MAX_MATCHES or size > max_bytes:
            more = True
            break
        values.append(match.obj)
        size += len(json.dumps(match.obj))
    note = f"the first {len(values)} matches; narrow the path for the rest." if more else None
    return Selection(json.dumps(values, indent=1), note)


__all__ = ["MAX_MATCHES", "Selection", "compile_path", "legacy_to_rfc", "select"]
