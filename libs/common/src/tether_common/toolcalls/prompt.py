"""The one call format we teach: the fence marker and the tool list for the system prompt.

The parser accepts many formats, but the prompt teaches exactly one, so well-behaved
models converge on it and the others stay a fallback. Under grammar-constrained decoding
(`grammar.reply_schema`) the model can only write one JSON object, so the prompt teaches
that object instead (`json_reply=True`).

The text depends only on the tools offered, never on the run or the time, so a server's
prompt cache can reuse it from one step and one run to the next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tether_common.toolcalls.model import OfferedTool

__all__ = ["TOOL_FENCE", "render_tool_prompt"]

TOOL_FENCE: Final = "```tool"
_EXAMPLE: Final = re.compile(r"(?:For e|E)xample:\s*(?=\{)")
_EXAMPLE_VALUES: Final[dict[str, object]] = {
    "string": "...",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}


def render_tool_prompt(tools: Sequence[OfferedTool], *, json_reply: bool = False) -> str:
    """System-prompt text that lists `tools` and teaches the fenced call format (or, with
    `json_reply`, the one-JSON-object reply of grammar-constrained decoding)."""
    if not tools:
        return ""
    example = json.dumps({"name": tools[0].name, "args": _example_args(tools[0])})
    if json_reply:
        # A neutral example: a real tool's would be copied whatever the question. Under
        # the grammar the schema holds each call's shape, so the tools' own examples are
        # left out too: a small model copied their values ("America/New_York" for Tokyo)
        # where, without them, it takes the question's ("Tokyo", which the gateway reads).
        called = '{"tool": "<the tool\'s name>", "args": {<its arguments>}}'
        described = (_describe(tool, examples=False) for tool in tools)
        return "\n".join([*_json_reply_rules(called), *described])
    lines = [
        "## Tools",
        f"To call a tool, write a fenced block opened with {TOOL_FENCE} holding one JSON object:",
        "",
        TOOL_FENCE,
        example,
        "```",
        "",
        'Rules: "name" is one of the tools below and "args" is an object with its parameters;',
        "use double quotes and plain JSON; write one block per call (several blocks for several",
        "calls); then stop and wait for the results. Without a tool, answer in plain text.",
        "",
        "Available tools (parameters marked ? are optional):",
    ]
    lines.extend(_describe(tool) for tool in tools)
    return "\n".join(lines)


def _json_reply_rules(example: str) -> list[str]:
    return [
        "## Tools",
        "Reply with exactly one JSON object. To call a tool:",
        example,
        "To answer the user, once a tool result holds what they asked (or no tool is "
        'needed): {"tool": "none", "answer": "..."}',
        "Never guess a value a tool can give: call the tool. After a tool result, answer "
        "from it; do not call a tool on its own result.",
        "",
        "Available tools (parameters marked ? are optional):",
    ]


def _describe(tool: OfferedTool, *, examples: bool = True) -> str:
    description = " ".join(str(getattr(tool, "description", "") or "").split())
    if not examples:
        description = without_examples(description)
    head = f"- {tool.name}({_signature(tool.parameters)})"
    return f"{head}: {description}" if description else head


def without_examples(description: str) -> str:
    """`description` with each `Example: {...}` call in it taken out."""
    out, rest = [], description
    while (found := _EXAMPLE.search(rest)) is not None:
        try:
            _, end = json.JSONDecoder().raw_decode(rest, found.end())
        except ValueError:
            break  # not a JSON example: kept as written
        out.append(rest[: found.start()].strip())
        rest = rest[end:]
    return " ".join(part for part in [*out, rest.strip()] if part)


def _signature(schema: Mapping[str, Any]) -> str:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return ""
    required = schema.get("required")
    wanted = set(required) if isinstance(required, list) else set()
    parts = []
    for key, prop in props.items():
        mark = "" if key in wanted else "?"
        parts.append(f"{key}{mark}: {_type_name(prop)}")
    return ", ".join(parts)


def _type_name(prop: object) -> str:
    if not isinstance(prop, Mapping):
        return "any"
    if isinstance(prop.get("enum"), list):
        return " | ".join(json.dumps(option) for option in prop["enum"])
    kind = prop.get("type")
    if isinstance(kind, list):
        return " | ".join(str(item) for item in kind)
    if kind == "array":
        return f"{_type_name(prop.get('items'))}[]"
    return str(kind) if isinstance(kind, str) else "any"


def _example_args(tool: OfferedTool) -> dict[str, object]:
    props = tool.parameters.get("properties")
    required = tool.parameters.get("required")
    if not isinstance(props, Mapping) or not isinstance(required, list):
        return {}
    args: dict[str, object] = {}
    for key in required:
        prop = props.get(key)
        kind = prop.get("type") if isinstance(prop, Mapping) else None
        args[str(key)] = _EXAMPLE_VALUES.get(kind, "...") if isinstance(kind, str) else "..."
    return args
