"""A tolerant JSON reader: the repair half of the tool-call parser.

Models without native tool calling write JSON that is nearly right. `read_json` reads one
value the way a lenient human would and reports where it ended, repairing on the way:
smart and single quotes, Python `True`/`False`/`None`, unquoted keys and barewords,
trailing or doubled commas, `//` and `/* */` comments, raw newlines inside strings, missing
closing braces or brackets, an unterminated final string, and text after the value (the
caller decides what to do with it).

Why not the `json-repair` package from PyPI: this runs on every model reply, so we take no
dependency for ~300 lines, and we need control over what is repaired. In particular a
quote ends a string only where JSON could go on (before `,` `:` `}` `]`, a new line that
continues the structure, or the end), which keeps unescaped quotes inside commands intact,
and a smart quote inside an ordinary `"…"` string stays text.

The reader is a small recursive-descent state machine over the string; it cannot raise
to its caller (`_UnreadableError` never leaves the module, nesting is capped at `MAX_DEPTH`).
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["MAX_DEPTH", "Reader", "parse_number", "read_json"]

MAX_DEPTH: Final = 64
_NUMBER: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER: Final = re.compile(r"[+-]?\d+")
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_KEY: Final = re.compile(r"[\w$.-]+")
# Which characters may close a string opened by each quote: smart quotes are often
# mismatched or mixed with ASCII ones, so any quote of the same family closes.
_CLOSERS: Final = {
    '"': '"',
    "'": "'",
    "“": '”“"',
    "”": '”“"',
    "‘": "’‘'",
    "’": "’‘'",
}
_STOPS: Final = {q: re.compile("[\\\\" + re.escape(c) + "]") for q, c in _CLOSERS.items()}
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_LITERALS: Final[dict[str, object]] = {
    "true": True,
    "false": False,
    "null": None,
    "none": None,
    "undefined": None,
}
# After a closing quote and a line break, these show the structure goes on (e.g. a
# missing comma before the next key); anything else means the quote was text.
_NEXT_LINE_GOES_ON: Final = ",:}]\"'“”‘’"
# Longer numerals are kept as text: int() refuses more than 4,300 digits.
_MAX_NUMERAL: Final = 300


class _UnreadableError(Exception):
    """The text at the cursor is no value; caught in `Reader.read`, never leaves here."""


def parse_number(text: str) -> int | float | None:
    """A JSON-ish numeral as int or finite float; None when it is not one."""
    text = text.strip()
    if len(text) > _MAX_NUMERAL or not _NUMBER.fullmatch(text):
        return None
    if _INTEGER.fullmatch(text):
        return int(text)
    value = float(text)
    return value if math.isfinite(value) else None


def read_json(text: str, start: int = 0, *, call_mode: bool = False) -> tuple[object, int] | None:
    """Read one value at `start` (blanks and comments first skipped): `(value, end)` or None.

    `call_mode` reads inside a Python-style call, where `)` also ends a bare value.
    """
    return Reader(text, start, call_mode=call_mode).read()


class Reader:
    """Cursor over `text`; `read` parses one value and leaves `pos` just after it."""

    def __init__(self, text: str, pos: int = 0, *, call_mode: bool = False) -> None:
        self.text = text
        self.pos = pos
        self.failed_at = -1  # where the last failed `read` gave up
        self._enders = ",}])\n" if call_mode else ",}]\n"
        self._after_quote = ",:}])" if call_mode else ",:}]"

    def read(self) -> tuple[object, int] | None:
        start = self.pos
        try:
            value = self._value(0)
        except _UnreadableError:
            self.failed_at, self.pos = self.pos, start
            return None
        return value, self.pos

    def skip_space(self) -> None:
        """Skip whitespace and comments."""
        text, end = self.text, len(self.text)
        while self.pos < end:
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                newline = text.find("\n", self.pos)
                self.pos = end if newline < 0 else newline
            elif text.startswith("/*", self.pos):
                close = text.find("*/", self.pos + 2)
                self.pos = end if close < 0 else close + 2
            else:
                return

    def _at_end(self) -> bool:
        return self.pos >= len(self.text)

    def _value(self, depth: int) -> object:
        self.skip_space()
        if self._at_end():
            raise _UnreadableError
        char = self.text[self.pos]
        if char == "{":
            return self._object(depth + 1)
        if char == "[":
            return self._array(depth + 1)
        if char in _CLOSERS:
            return self._string()
        return self._scalar()

    def _object(self, depth: int) -> dict[str, object]:
        if depth > MAX_DEPTH:
            raise _UnreadableError
        self.pos += 1
        out: dict[str, object] = {}
        while True:
            self.skip_space()
            if self._at_end():
                return out  # missing closing brace
            char = self.text[self.pos]
            if char == "}":
                self.pos += 1
                return out
            if char == "]":
                return out  # mismatched closer: it belongs to an enclosing array
            if char == ",":
                self.pos += 1
                continue
            if not self._member(out, depth):
                return out

    def _member(self, out: dict[str, object], depth: int) -> bool:
        """Read `key: value` into `out`; False (cursor restored) when no key is here."""
        mark = self.pos
        key = self._key()
        if key is None:
            return False  # prose or junk where a key belongs: the brace was lost
        self.skip_space()
        if self._at_end():
            return False  # a key cut off at the very end is dropped
        if self.text[self.pos] not in ":=":
            self.pos = mark
            return False
        self.pos += 1
        self.skip_space()
        if self._at_end():
            return False  # `"key":` at the very end: drop the key
        out[key] = self._value(depth)
        return True

    def _key(self) -> str | None:
        if self.text[self.pos] in _CLOSERS:
            return self._string()
        match = _KEY.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return match.group()

    def _array(self, depth: int) -> list[object]:
        if depth > MAX_DEPTH:
            raise _UnreadableError
        self.pos += 1
        out: list[object] = []
        while True:
            self.skip_space()
            if self._at_end():
                return out  # missing closing bracket
            char = self.text[self.pos]
            if char == "]":
                self.pos += 1
                return out
            if char == "}":
                return out  # mismatched closer: it belongs to an enclosing object
            if char == ",":
                self.pos += 1
                continue
            out.append(self._value(depth))

    def _string(self) -> str:
        text = self.text
        opener = text[self.pos]
        stops, closers = _STOPS[opener], _CLOSERS[opener]
        parts: list[str] = []
        start = pos = self.pos + 1
        while (found := stops.search(text, pos)) is not None:
            pos = found.start()
            if text[pos] == "\\":
                parts.append(text[start:pos])
                char, pos = self._escape(pos)
                parts.append(char)
                start = pos
            elif text[pos] in closers and self._closes_at(pos):
                parts.append(text[start:pos])
                self.pos = pos + 1
                return "".join(parts)
            else:
                pos += 1
        parts.append(text[start:])  # unterminated final string: it runs to the end
        self.pos = len(text)
        return "".join(parts)

    def _closes_at(self, pos: int) -> bool:
        """Whether the quote at `pos` ends the string: only where the structure goes on."""
        text, end = self.text, len(self.text)
        pos += 1
        while pos < end and text[pos] in " \t\r":
            pos += 1
        if pos >= end or text[pos] in self._after_quote:
            return True
        if text[pos] != "\n":
            return False
        while pos < end and text[pos].isspace():
            pos += 1
        return pos >= end or text[pos] in _NEXT_LINE_GOES_ON

    def _escape(self, pos: int) -> tuple[str, int]:
        """Decode the escape whose backslash is at `pos`; return (text, next position)."""
        text = self.text
        if pos + 1 >= len(text):
            return "\\", pos + 1
        char = text[pos + 1]
        if char != "u":
            return _ESCAPES.get(char, char), pos + 2
        digits = text[pos + 2 : pos + 6]
        if not _HEX4.fullmatch(digits):
            return "\\u", pos + 2
        code = int(digits, 16)
        if 0xD800 <= code < 0xDC00:
            low = text[pos + 8 : pos + 12]
            if text.startswith("\\u", pos + 6) and _HEX4.fullmatch(low):
                low_code = int(low, 16)
                if 0xDC00 <= low_code < 0xE000:
                    return chr(0x10000 + ((code - 0xD800) << 10) + low_code - 0xDC00), pos + 12
        if 0xD800 <= code < 0xE000:
            return "\ufffd", pos + 6  # a lone surrogate could not be encoded later
        return chr(code), pos + 6

    def _scalar(self) -> object:
        text = self.text
        match = _NUMBER.match(text, self.pos)
        if match is not None and self._ends_token(match.end()):
            number = parse_number(match.group())
            if number is not None:
                self.pos = match.end()
                return number
        end = self.pos
        while end < len(text) and text[end] not in self._enders:
            end += 1
        word = text[self.pos : end].strip()
        if not word:
            raise _UnreadableError
        self.pos = end
        return _LITERALS.get(word.lower(), word)

    def _ends_token(self, pos: int) -> bool:
        return pos >= len(self.text) or self.text[pos].isspace() or self.text[pos] in self._enders
