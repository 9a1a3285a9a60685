"""Finds call blocks in visible text, left to right, one reader per format.

Explicit formats (a call marker): a ```` ```tool ```` fence, `<tool_call>…</tool_call>`,
`<|python_tag|>`, `<function=NAME>…</function>`, `[TOOL_CALLS]`. Implicit: a bare JSON
object or list, or one in a ```` ```json ```` fence, counts only when it plainly calls an
offered tool; fences in other languages are code and are never looked into.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tether_common.toolcalls.calls import (
    NAME_KEYS,
    Catalog,
    Outcome,
    call_from_parts,
    calls_from_value,
    problem,
)
from tether_common.toolcalls.pycalls import read_python_calls
from tether_common.toolcalls.repair import Reader, read_json

__all__ = ["Block", "parse_payload", "scan_blocks"]

_START: Final = re.compile(
    r"```|<tool_call>|<\|python_tag\|>|<function=|\[TOOL_CALLS\]|[{\[]", re.IGNORECASE
)
_FENCE_OPEN: Final = re.compile(r"```[ \t]*([\w+.-]*)[ \t]*(\r?\n)?")
_LINE_FENCE: Final = re.compile(r"^[ \t]*```", re.MULTILINE)
_TOOL_LANGS: Final = frozenset(
    {"tool", "tool_call", "tool_calls", "tool_code", "tool_use", "function_call", "functions"}
)
_DATA_LANGS: Final = frozenset({"", "json", "json5", "jsonc", "javascript", "js"})
_TOOL_CALL_END: Final = re.compile(r"</tool_call>|(?=<tool_call>)", re.IGNORECASE)
_PYTHON_TAG_END: Final = re.compile(
    r"<\|eom_id\|>|<\|eot_id\|>|(?=<\|python_tag\|>)", re.IGNORECASE
)
_FUNCTION: Final = re.compile(
    r"<function=([^<>\n]*)>(.*?)(?:</function>|(?=<function=)|\Z)", re.IGNORECASE | re.DOTALL
)
_PARAMETER: Final = re.compile(
    r"<parameter=([^<>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_NAMED_ARGS: Final = re.compile(r"([A-Za-z_][\w.-]*)(?:\[CALL_ID\][^\[]*)?(?:\[ARGS\]|[ \t]+)")
# A broken object that still opens by naming a tool: `{"name": "shell", …`.
_NAMES_TOOL: Final = re.compile(
    r"""\{\s*["'“]?(?:""" + "|".join(NAME_KEYS) + r""")["'”]?\s*:\s*["'“]([^"'”\n]+)"""
)


@dataclass(frozen=True, slots=True)
class Block:
    """A span of the text that held calls (or, behind a marker, tried to)."""

    start: int
    end: int
    outcome: Outcome
    explicit: bool


class _Scan:
    """One pass over a text: the text, the tools, and fence lines found once, not per fence."""

    def __init__(self, text: str, catalog: Catalog) -> None:
        self.text = text
        self.catalog = catalog
        self._line_fences: list[int] | None = None

    def line_fence(self, start: int) -> int:
        """The first "```" at or after `start` with only blanks before it on its line."""
        if self._line_fences is None:
            self._line_fences = [m.end() - 3 for m in _LINE_FENCE.finditer(self.text)]
        index = bisect_left(self._line_fences, start)
        return self._line_fences[index] if index < len(self._line_fences) else -1


_Handler = Callable[[_Scan, "re.Match[str]"], tuple[Block | None, int]]


def scan_blocks(text: str, catalog: Catalog) -> list[Block]:
    """Every call block in `text`, in order; spans never overlap."""
    blocks: list[Block] = []
    scan = _Scan(text, catalog)
    pos = 0
    while (found := _START.search(text, pos)) is not None:
        block, pos = _HANDLERS.get(found.group().lower(), _bare)(scan, found)
        pos = max(pos, found.start() + 1)  # every handler moves on; this makes it certain
        if block is not None:
            blocks.append(_with_a_reason(block))
    return blocks


def _with_a_reason(block: Block) -> Block:
    """A marked block that came to nothing (`[TOOL_CALLS][]`) still says why."""
    if not block.explicit or block.outcome.calls or block.outcome.problems:
        return block
    return Block(block.start, block.end, problem("the tool call block holds no call"), True)


def _fence(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    text, catalog = scan.text, scan.catalog
    opening = _FENCE_OPEN.match(text, found.start())
    if opening is None:  # cannot happen: the pattern matches any "```"
        return None, found.end()
    lang = opening.group(1).lower()
    close = _fence_close(scan, opening.end(), inline=opening.group(2) is None)
    body = text[opening.end() : close if close >= 0 else len(text)]
    end = close + 3 if close >= 0 else len(text)
    if lang in _TOOL_LANGS:
        return Block(found.start(), end, parse_payload(body, catalog), explicit=True), end
    if close < 0:
        return None, found.end()  # an unclosed code fence: keep looking inside
    if lang in _DATA_LANGS:
        outcome = Outcome.combine(
            calls_from_value(value, catalog, explicit=False) for value in _read_values(body)
        )
        if outcome.calls:
            return Block(found.start(), end, outcome, explicit=False), end
    return None, end  # code or data: neither a call nor a place to look for one


def _fence_close(scan: _Scan, body_start: int, *, inline: bool) -> int:
    """The closing "```": on a line of its own, else (an inline fence) the first one."""
    own_line = -1 if inline else scan.line_fence(body_start)
    return own_line if own_line >= 0 else scan.text.find("```", body_start)


def _tool_call(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    return _closed_by(_TOOL_CALL_END, scan, found)


def _python_tag(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    return _closed_by(_PYTHON_TAG_END, scan, found)


def _closed_by(
    closer: re.Pattern[str], scan: _Scan, found: re.Match[str]
) -> tuple[Block | None, int]:
    """A marker whose payload runs to `closer`, or to the end when the model stopped early."""
    closed = closer.search(scan.text, found.end())
    if closed is None:
        body_end = end = len(scan.text)
    else:
        body_end, end = closed.start(), closed.end()
    outcome = parse_payload(scan.text[found.end() : body_end], scan.catalog)
    return Block(found.start(), end, outcome, explicit=True), end


def _function(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    text, catalog = scan.text, scan.catalog
    tag = _FUNCTION.match(text, found.start())
    if tag is None:  # "<function=" with no ">": nothing to read
        outcome = problem("a <function=NAME> tag was not closed with '>'")
        return Block(found.start(), len(text), outcome, explicit=True), len(text)
    return Block(found.start(), tag.end(), _function_outcome(tag, catalog), True), tag.end()


def _function_outcome(tag: re.Match[str], catalog: Catalog) -> Outcome:
    name, body = tag.group(1).strip().strip("\"'"), tag.group(2)
    if not name:
        return problem("a <function=NAME> tag has no name")
    if "<parameter=" not in body.lower():
        return call_from_parts(name, body.strip(), catalog)
    args: dict[str, object] = {}
    for parameter in _PARAMETER.finditer(body):
        key = parameter.group(1).strip().strip("\"'")
        # Values sit on lines of their own between the tags; those line breaks are layout.
        args[key] = parameter.group(2).removeprefix("\n").removesuffix("\n")
    return call_from_parts(name, args, catalog)


def _mistral(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    """`[TOOL_CALLS][{…}]`, or the newer `[TOOL_CALLS]name[ARGS]{…}`."""
    text, catalog = scan.text, scan.catalog
    pos = found.end()
    while pos < len(text) and text[pos].isspace():
        pos += 1
    named = None if text.startswith(("{", "["), pos) else _NAMED_ARGS.match(text, pos)
    if named is None and not text.startswith(("{", "["), pos):
        read = None
    else:
        read = read_json(text, named.end() if named else pos)
    if read is None:
        outcome = problem("[TOOL_CALLS] must be followed by a JSON list of calls")
        return Block(found.start(), len(text), outcome, explicit=True), len(text)
    value, end = read
    if named is not None:
        outcome = call_from_parts(named.group(1), value, catalog)
    else:
        outcome = calls_from_value(value, catalog, explicit=True)
    return Block(found.start(), end, outcome, explicit=True), end


def _bare(scan: _Scan, found: re.Match[str]) -> tuple[Block | None, int]:
    text, catalog = scan.text, scan.catalog
    reader = Reader(text, found.start())
    read = reader.read()
    if read is None:
        block = _unreadable_bare(text, found, catalog)
        if block is not None:
            return block, block.end
        # Every brace before the point of failure is inside the same broken value (or
        # nested past MAX_DEPTH); rereading from each would make the scan quadratic.
        return None, reader.failed_at
    value, end = read
    outcome = calls_from_value(value, catalog, explicit=False)
    if outcome.calls:
        return Block(found.start(), end, outcome, explicit=False), end
    return None, end  # data: skip it whole, so its inner braces are not read as calls


def _unreadable_bare(text: str, found: re.Match[str], catalog: Catalog) -> Block | None:
    """Broken JSON that opens by naming an offered tool was meant as a call: ask again."""
    named = _NAMES_TOOL.match(text, found.start())
    tool = None if named is None else catalog.resolve(named.group(1))
    if tool is None:
        return None
    outcome = problem(f"the call to {tool.name!r} is not readable JSON")
    return Block(found.start(), len(text), outcome, explicit=True)


_HANDLERS: Final[dict[str, _Handler]] = {
    "```": _fence,
    "<tool_call>": _tool_call,
    "<|python_tag|>": _python_tag,
    "<function=": _function,
    "[tool_calls]": _mistral,
}


def parse_payload(body: str, catalog: Catalog) -> Outcome:
    """The calls inside a marker: JSON, `<function=…>` tags or Python-style calls."""
    text = body.strip()
    if not text:
        return problem("the tool call block is empty")
    if "<function=" in text.lower():
        return Outcome.combine(_function_outcome(tag, catalog) for tag in _FUNCTION.finditer(text))
    if text[0] not in "{[":
        calls, _ = read_python_calls(text)
        if calls:
            return Outcome.combine(
                call_from_parts(call.name, call.keywords, catalog, positional=call.positional)
                for call in calls
            )
        named = _NAMED_ARGS.match(text)
        if named is not None and text[named.end() :].lstrip().startswith("{"):
            read = read_json(text, named.end())
            if read is not None:
                return call_from_parts(named.group(1), read[0], catalog)
    values = _read_values(text)
    if not values:
        return problem('the tool call is not readable; write {"name": "...", "args": {...}}')
    return Outcome.combine(calls_from_value(value, catalog, explicit=True) for value in values)


def _read_values(text: str) -> list[object]:
    """JSON values one after another from the first brace, up to the first other text."""
    starts = [index for index in (text.find("{"), text.find("[")) if index >= 0]
    values: list[object] = []
    pos = min(starts, default=len(text))
    while pos < len(text) and text[pos] in "{[":
        read = read_json(text, pos)
        if read is None:
            break
        value, pos = read
        values.append(value)
        while pos < len(text) and (text[pos].isspace() or text[pos] in ",;"):
            pos += 1
    return values
