"""`parse_tool_calls`: one model output in, calls + visible text + reasoning out."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Final

from tether_common.toolcalls.calls import Catalog
from tether_common.toolcalls.formats import Block, scan_blocks
from tether_common.toolcalls.model import OfferedTool, ParseResult
from tether_common.toolcalls.reasoning import split_reasoning

__all__ = ["CALL_MARKERS", "find_call_marker", "parse_tool_calls"]

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


def _parse(
    text: str, tools: Sequence[OfferedTool], aliases: Mapping[str, str] | None
) -> ParseResult:
    visible, reasoning = split_reasoning(text)
    blocks = scan_blocks(visible, Catalog(tools, aliases))
    calls = tuple(call for block in blocks for call in block.outcome.calls)
    return ParseResult(
        calls=calls,
        retry=not calls and any(block.explicit for block in blocks),
        text=_without(visible, blocks),
        reasoning=reasoning,
        problems=tuple(problem for block in blocks for problem in block.outcome.problems),
    )


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
