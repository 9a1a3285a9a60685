"""The taught format, the streaming markers, the public surface, and duck-typed tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

import tether_common.toolcalls as toolcalls
from tether_common.toolcalls import (
    CALL_MARKERS,
    TOOL_FENCE,
    OfferedTool,
    ToolSpec,
    find_call_marker,
    parse_tool_calls,
    render_tool_prompt,
)


def test_public_surface_is_explicit() -> None:
    assert sorted(toolcalls.__all__) == sorted(
        [
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
    )
    assert all(hasattr(toolcalls, name) for name in toolcalls.__all__)


def test_fence_marker_is_the_tool_fence() -> None:
    assert TOOL_FENCE == "```tool"
    assert TOOL_FENCE in CALL_MARKERS


def test_prompt_lists_every_tool_compactly(tools: tuple[ToolSpec, ...]) -> None:
    prompt = render_tool_prompt(tools)
    assert (
        "- file_read(path: string, offset?: integer, limit?: integer): Read a text file" in prompt
    )
    assert "- file_list(path?: string, recursive?: boolean, exclude?: string[])" in prompt
    assert "- shell(command: string, timeout?: integer)" in prompt
    for tool in tools:
        assert f"- {tool.name}(" in prompt


def test_prompt_teaches_one_format(tools: tuple[ToolSpec, ...]) -> None:
    prompt = render_tool_prompt(tools)
    assert prompt.count(TOOL_FENCE) >= 2  # named in the rule and opening the example
    for other in ("<tool_call>", "<|python_tag|>", "<function=", "[TOOL_CALLS]"):
        assert other not in prompt


def test_prompt_example_parses_as_a_call(tools: tuple[ToolSpec, ...]) -> None:
    prompt = render_tool_prompt(tools)
    example = prompt[prompt.index(f"{TOOL_FENCE}\n") :]
    result = parse_tool_calls(example, tools)
    assert [(c.name, c.args) for c in result.calls] == [("current_time", {"timezone": "..."})]


def test_prompt_shows_enums_and_unions() -> None:
    tool = ToolSpec(
        "paint",
        {
            "type": "object",
            "properties": {
                "color": {"type": "string", "enum": ["red", "blue"]},
                "note": {"type": ["string", "null"]},
                "shape": {},
            },
            "required": ["color"],
        },
        description="Paint   a\nwall.",
    )
    prompt = render_tool_prompt([tool])
    assert (
        '- paint(color: "red" | "blue", note?: string | null, shape?: any): Paint a wall.' in prompt
    )
    assert '{"name": "paint", "args": {"color": "..."}}' in prompt


def test_prompt_for_no_tools_is_empty() -> None:
    assert render_tool_prompt([]) == ""


def test_call_markers_are_the_documented_ones() -> None:
    assert CALL_MARKERS == (
        "```tool",
        "<tool_call>",
        "<|python_tag|>",
        "<function=",
        "[TOOL_CALLS]",
        '{"name"',
    )


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("no marker here", -1),
        ("", -1),
        ("```tool\n{}", 0),
        ("Sure. <tool_call>", 6),
        ("ab<|python_tag|>x", 2),
        ("x <function=shell>", 2),
        ("[TOOL_CALLS][]", 0),
        ('Here {"name": "x"}', 5),
        ('{"name" then ```tool', 0),
        ('text ```tool then {"name"', 5),
        ("```json\n{}", -1),
    ],
)
def test_find_call_marker_returns_the_earliest(text: str, index: int) -> None:
    assert find_call_marker(text) == index


class PydanticTool(BaseModel):
    """Stands in for the catalogue's pydantic tool model: attributes, not a ToolSpec."""

    name: str
    parameters: dict[str, Any]
    description: str = ""
    aliases: list[str] = []


def test_pydantic_models_are_offered_tools() -> None:
    tool = PydanticTool(
        name="shell",
        parameters={"type": "object", "properties": {"command": {"type": "string"}}},
        description="Run a command.",
        aliases=["run"],
    )
    offered: list[OfferedTool] = [tool]
    result = parse_tool_calls('```tool\n{"name": "run", "args": {"cmd": "ls"}}\n```', offered)
    assert [(c.name, c.args) for c in result.calls] == [("shell", {"command": "ls"})]
    assert "- shell(command?: string): Run a command." in render_tool_prompt(offered)


class OddTool:
    """A tool whose optional attributes are missing or malformed must still work."""

    name = "odd"
    aliases = "not-a-list"

    @property
    def parameters(self) -> Mapping[str, Any]:
        return {"type": "object", "properties": "broken"}


def test_malformed_optional_attributes_are_tolerated() -> None:
    result = parse_tool_calls('```tool\n{"name": "odd", "args": {"a": 1}}\n```', [OddTool()])
    assert [(c.name, c.args) for c in result.calls] == [("odd", {"a": 1})]
    assert render_tool_prompt([OddTool()]).endswith("- odd()")
