"""Reads Python-style calls, `name(arg="x", n=5)`, as Llama's `<|python_tag|>` and some
`tool_code` fences carry them; values go through the tolerant JSON reader."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from tether_common.toolcalls.repair import read_json

__all__ = ["PythonCall", "read_python_calls"]

_CALL_START: Final = re.compile(r"\s*([A-Za-z_][\w.]*)\s*\(")
_KEYWORD: Final = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)\s*")


@dataclass(frozen=True, slots=True)
class PythonCall:
    name: str
    keywords: dict[str, object] = field(default_factory=dict)
    positional: tuple[object, ...] = ()


def read_python_calls(text: str) -> tuple[list[PythonCall], int]:
    """Calls at the start of `text`, separated by `;`, `,` or new lines, and where they end."""
    calls: list[PythonCall] = []
    pos = 0
    while (start := _CALL_START.match(text, pos)) is not None:
        read = _read_call(text, start)
        if read is None:
            break
        call, pos = read
        calls.append(call)
        pos = _skip(text, pos, " \t\r\n;,")
    return calls, pos


def _read_call(text: str, start: re.Match[str]) -> tuple[PythonCall, int] | None:
    keywords: dict[str, object] = {}
    positional: list[object] = []
    pos = start.end()
    while True:
        pos = _skip(text, pos, " \t\r\n,")
        if pos >= len(text) or text[pos] == ")":  # a missing ")" at the end is forgiven
            call = PythonCall(start.group(1), keywords, tuple(positional))
            return call, min(pos + 1, len(text))
        keyword = _KEYWORD.match(text, pos)
        read = read_json(text, keyword.end() if keyword else pos, call_mode=True)
        if read is None:
            return None
        value, pos = read
        if keyword is not None:
            keywords[keyword.group(1)] = value
        else:
            positional.append(value)


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos
