"""Free-text tool calls: parse them out of a model's text, and teach the one format we want.

Owns: finding calls in the output of models without native tool calling (every common
format, repaired and coerced to the offered tool's schema), separating reasoning from
visible text, the alias table, and the prompt that teaches the canonical ```` ```tool ````
fence. The JSON repair is our own small reader (`repair`), deliberately not the
`json-repair` package: no dependency on the hot path, and control over what is repaired.
Never does: validate arguments against the schema (the brain's first gate does),
run a tool, or raise on any input.

Modules: `parser` (entry point, markers), `formats` (one reader per format), `calls`
(value → call), `pycalls` (Python-style calls), `repair` (tolerant JSON reader),
`coerce` (schema coercion), `aliases` (name and key tables), `reasoning` (think blocks),
`prompt` (the system-prompt text), `model` (value types), `grammar` (the JSON schema of
grammar-constrained replies, and reading them).

Repairs beyond syntax (a tool's name read from a near or alias name, a key renamed or
dropped, a missing name inferred because the keys fit exactly one offered tool) are
listed on each `ParsedCall.repairs`, so the caller can record them on the step.
"""

from tether_common.toolcalls.aliases import DEFAULT_ALIASES, KEY_SYNONYMS
from tether_common.toolcalls.grammar import ANSWER_KEY, TOOL_KEY, read_reply, reply_schema
from tether_common.toolcalls.model import OfferedTool, ParsedCall, ParseResult, ToolSpec
from tether_common.toolcalls.parser import (
    CALL_MARKERS,
    find_call_marker,
    fit_call,
    parse_tool_calls,
)
from tether_common.toolcalls.prompt import TOOL_FENCE, render_tool_prompt

__all__ = [
    "ANSWER_KEY",
    "CALL_MARKERS",
    "DEFAULT_ALIASES",
    "KEY_SYNONYMS",
    "TOOL_FENCE",
    "TOOL_KEY",
    "OfferedTool",
    "ParseResult",
    "ParsedCall",
    "ToolSpec",
    "find_call_marker",
    "fit_call",
    "parse_tool_calls",
    "read_reply",
    "render_tool_prompt",
    "reply_schema",
]
