"""Grammar-constrained replies: the JSON schema a server that supports constrained
decoding (llama.cpp's `response_format`) holds the model to, and reading such a reply.

Every reply opens with the choice, `{"tool": ...`: one of the offered tools' names, then
`"args"` with that tool's own parameters, or `"none"`, then `"answer"` with the text. So a
model under the schema can only make a well-formed call to a tool that exists, or answer;
and it decides which before it writes anything else (small models asked for a free
answer first tend to invent the value a tool would have given). The
tool's schema is copied down to the keywords grammar converters handle everywhere (types,
properties, required, enum, items); `additionalProperties: false` stays.

Never does: talk to a server (the gateway's adapter sends the schema), or trust the
reply: it is still read with the tolerant parser and fitted to the schema, because a
reply cut off by the token limit is unterminated JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tether_common.toolcalls.calls import Catalog, call_from_parts
from tether_common.toolcalls.model import OfferedTool, ParseResult
from tether_common.toolcalls.repair import read_json

__all__ = ["ANSWER_KEY", "NO_TOOL", "TOOL_KEY", "read_reply", "reply_schema"]

TOOL_KEY: Final = "tool"
NO_TOOL: Final = "none"
ANSWER_KEY: Final = "answer"
# String lengths are left out: a converter spells `maxLength: 1000` as a thousand nested
# optional rules, which llama.cpp builds for every request (minutes on a small CPU); the
# brain's schema gate still checks lengths on the call that comes out.
_KEPT: Final = frozenset({"type", "properties", "required", "enum", "items"})


def reply_schema(tools: Sequence[OfferedTool], *, answer: bool = True) -> dict[str, Any]:
    """One call to one of `tools`, or `{"tool": "none", "answer": str}`, as one schema;
    without `answer` (a call is required), a call only. With no tools, the answer."""
    text = {
        "type": "object",
        "properties": {TOOL_KEY: {"const": NO_TOOL}, ANSWER_KEY: {"type": "string"}},
        "required": [TOOL_KEY, ANSWER_KEY],
        "additionalProperties": False,
    }
    calls = [_call_branch(tool) for tool in tools]
    return {"anyOf": [*calls, text] if answer or not calls else calls}


def _call_branch(tool: OfferedTool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {TOOL_KEY: {"const": tool.name}, "args": _plain(tool.parameters)},
        "required": [TOOL_KEY, "args"],
        "additionalProperties": False,
    }


def _plain(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with only the keywords every grammar converter understands, recursively."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _plain(prop) for name, prop in value.items() if _is_map(prop)}
        elif key == "items" and isinstance(value, Mapping):
            out[key] = _plain(value)
        elif key in _KEPT:
            out[key] = value
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("type", "object")
        out.setdefault("properties", {})
        out["additionalProperties"] = False
    return out


def _is_map(value: object) -> bool:
    return isinstance(value, Mapping)


def read_reply(
    text: str, tools: Sequence[OfferedTool], *, aliases: Mapping[str, str] | None = None
) -> ParseResult | None:
    """A reply written under `reply_schema`: the answer as text, or the call. None when
    the text is not such a reply (the caller falls back to the ordinary parser)."""
    stripped = text.strip()
    read = read_json(stripped) if stripped.startswith("{") else None
    if read is None or not isinstance(read[0], dict):
        return None
    value: dict[str, object] = read[0]
    name = value.get(TOOL_KEY, value.get("name"))
    answer = value.get(ANSWER_KEY)
    if isinstance(answer, str) and name in (NO_TOOL, None):
        return ParseResult(calls=(), retry=False, text=answer.strip(), reasoning="")
    if not isinstance(name, str) or name == NO_TOOL:
        return None
    outcome = call_from_parts(name, value.get("args"), Catalog(tools, aliases))
    return ParseResult(
        calls=outcome.calls,
        retry=not outcome.calls,
        text="",
        reasoning="",
        problems=outcome.problems,
    )
