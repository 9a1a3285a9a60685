"""Grammar-constrained replies: the JSON schema a server that supports constrained
decoding (llama.cpp's `response_format`) holds the model to, and reading such a reply.

The schema has one branch for a plain answer, `{"answer": "..."}`, and one branch per
offered tool, `{"name": "<tool>", "args": {...}}` with the tool's own parameters, so a
model under it can only answer or make a well-formed call to a tool that exists. The
tool's schema is copied down to the keywords grammar converters handle everywhere (types,
properties, required, enum, items, string lengths); `additionalProperties: false` stays.

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

__all__ = ["ANSWER_KEY", "read_reply", "reply_schema"]

ANSWER_KEY: Final = "answer"
_KEPT: Final = frozenset(
    {"type", "properties", "required", "enum", "items", "minLength", "maxLength"}
)


def reply_schema(tools: Sequence[OfferedTool]) -> dict[str, Any]:
    """`{"answer": str}` or one call to one of `tools`, as one JSON schema."""
    answer = {
        "type": "object",
        "properties": {ANSWER_KEY: {"type": "string", "minLength": 1}},
        "required": [ANSWER_KEY],
        "additionalProperties": False,
    }
    return {"anyOf": [answer, *(_call_branch(tool) for tool in tools)]}


def _call_branch(tool: OfferedTool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "args": _plain(tool.parameters)},
        "required": ["name", "args"],
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
    answer = value.get(ANSWER_KEY)
    if isinstance(answer, str) and "name" not in value:
        return ParseResult(calls=(), retry=False, text=answer.strip(), reasoning="")
    name = value.get("name")
    if not isinstance(name, str):
        return None
    outcome = call_from_parts(name, value.get("args"), Catalog(tools, aliases))
    return ParseResult(
        calls=outcome.calls,
        retry=not outcome.calls,
        text="",
        reasoning="",
        problems=outcome.problems,
    )
