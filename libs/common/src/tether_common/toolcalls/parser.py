"""`parse_tool_calls`: one model output in, calls + visible text + reasoning out."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Final

from tether_common.toolcalls.calls import Catalog, call_from_parts, nameless_call
from tether_common.toolcalls.formats import Block, scan_blocks
from tether_common.toolcalls.model import OfferedTool, ParsedCall, ParseResult
from tether_common.toolcalls.reasoning import split_reasoning
from tether_common.toolcalls.repair import read_json

__all__ = ["CALL_MARKERS", "find_call_marker", "fit_call", "parse_tool_calls"]

logger = logging.getLogger(__name__)

CALL_MARKERS: Final = (
    "```tool",
    "<tool_call>",
    "<|python_tag|>",
    "<function=",
    "[TOOL_CALLS]",
    '{"name"',
)
_BLANK_LINES: Final = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def find_call_marker(text: str) -> int:
    """Index of the earliest call marker in `text`, or -1; streaming holds text back from it."""
    return min((index for marker in CALL_MARKERS if (index := text.find(marker)) >= 0), default=-1)


def parse_tool_calls(
    text: str, tools: Sequence[OfferedTool], *, aliases: Mapping[str, str] | None = None
) -> ParseResult:
    """Find the tool calls in a model's free text; never raises.

    Calls come back in the order written, named by the offered tool and with arguments
    coerced to its schema. `aliases` extends `DEFAULT_ALIASES` (and wins over it).
    """
    try:
        return _parse(text, tools, aliases)
    except Exception:  # the outermost boundary: a parser bug must not break a model reply
        logger.exception("tool-call parser failed; the output is treated as text")
        marked = find_call_marker(text) >= 0 if isinstance(text, str) else False
        shown = text.strip() if isinstance(text, str) else ""
        problems = ("the tool call could not be read",) if marked else ()
        return ParseResult(calls=(), retry=marked, text=shown, reasoning="", problems=problems)


def fit_call(
    name: str,
    args: object,
    tools: Sequence[OfferedTool],
    *,
    aliases: Mapping[str, str] | None = None,
) -> ParsedCall | None:
    """A call the provider delivered natively, fitted to the offered tools the way a text
    call is: the name resolved (aliases, a near name), keys renamed, values coerced, and a
    missing name inferred from the keys when they fit one tool. None when it cannot be
    fitted (the caller passes it on as it is, and the brain's gate names the problem)."""
    catalog = Catalog(tools, aliases)
    outcome = call_from_parts(name, args, catalog) if name.strip() else nameless_call(args, catalog)
    return outcome.calls[0] if len(outcome.calls) == 1 else None


def _parse(
    text: str, tools: Sequence[OfferedTool], aliases: Mapping[str, str] | None
) -> ParseResult:
    visible, reasoning = split_reasoning(text)
    catalog = Catalog(tools, aliases)
    blocks = scan_blocks(visible, catalog) or _whole_reply_call(visible, catalog)
    calls = tuple(call for block in blocks for call in block.outcome.calls)
    return ParseResult(
        calls=calls,
        retry=not calls and any(block.explicit for block in blocks),
        text=_without(visible, blocks),
        reasoning=reasoning,
        problems=tuple(problem for block in blocks for problem in block.outcome.problems),
    )


def _whole_reply_call(text: str, catalog: Catalog) -> list[Block]:
    """A reply that is nothing but one JSON object naming no tool, whose keys fit exactly
    one offered tool (`{"expression": "2+2"}`), is that tool's call: small models write
    the arguments and forget the name. Inside other text such an object stays data."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return []
    read = read_json(stripped)
    if read is None or read[1] != len(stripped):
        return []
    outcome = nameless_call(read[0], catalog)
    if not outcome.calls:
        return []
    start = text.index("{")
    return [Block(start, start + len(stripped), outcome, explicit=False)]


def _without(text: str, blocks: Sequence[Block]) -> str:
    """`text` with the blocks cut out, the seams tidied, stripped."""
    if not blocks:
        return text.strip()
    pieces: list[str] = []
    pos = 0
    for block in blocks:
        pieces.append(text[pos : block.start])
        pos = block.end
    pieces.append(text[pos:])
    joined = pieces[0]
    for piece in pieces[1:]:
        left, right = joined.rstrip(" \t"), piece.lstrip(" \t")
        inline = left and right and not left.endswith("\n") and not right.startswith("\n")
        joined = left + (" " if inline else "") + right
    return _BLANK_LINES.sub("\n\n", joined).strip()
