"""Reasoning blocks are split off, and calls written inside them are never run."""

from __future__ import annotations

import pytest

from tether_common.toolcalls import ToolSpec, parse_tool_calls

CALL = '```tool\n{"name": "shell", "args": {"command": "ls"}}\n```'

SPLITS: list[tuple[str, str, str, str]] = [
    ("think", "<think>plan it</think>The answer.", "The answer.", "plan it"),
    ("thinking", "<thinking>plan it</thinking>\nThe answer.", "The answer.", "plan it"),
    ("reasoning", "<reasoning>plan it</reasoning>The answer.", "The answer.", "plan it"),
    ("upper", "<THINK>plan it</THINK>The answer.", "The answer.", "plan it"),
    ("orphan-close", "plan it</think>The answer.", "The answer.", "plan it"),
    (
        "orphan-close-multiline",
        "step 1\nstep 2\n</think>\n\nThe answer.",
        "The answer.",
        "step 1\nstep 2",
    ),
    ("unclosed", "The answer. <think>more thoughts", "The answer.", "more thoughts"),
    ("only-thoughts", "<think>just thinking", "", "just thinking"),
    ("two-blocks", "<think>a</think>x <think>b</think>y", "x y", "a\n\nb"),
    ("empty-block", "<think></think>The answer.", "The answer.", ""),
    ("none", "The answer.", "The answer.", ""),
    ("orphan-then-block", "a</think>x<think>b</think>y", "xy", "a\n\nb"),
    ("stray-second-close", "<think>a</think>x</think>y", "xy", "a"),
]


@pytest.mark.parametrize(
    ("text", "visible", "reasoning"), [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS]
)
def test_reasoning_is_split_off(
    text: str, visible: str, reasoning: str, tools: tuple[ToolSpec, ...]
) -> None:
    result = parse_tool_calls(text, tools)
    assert (result.text, result.reasoning) == (visible, reasoning)
    assert result.calls == ()


IGNORED = [
    ("inside-block", f"<think>maybe {CALL}</think>No tool needed."),
    ("inside-orphan", f"maybe {CALL}</think>No tool needed."),
    ("inside-unclosed", f"No tool needed. <think>maybe {CALL}"),
    ("bare-inside", '<think>{"name": "shell", "args": {"command": "ls"}}</think>No.'),
    (
        "tag-inside",
        '<thinking><tool_call>{"name": "shell", "arguments": {}}</tool_call></thinking>No.',
    ),
]


@pytest.mark.parametrize("text", [c[1] for c in IGNORED], ids=[c[0] for c in IGNORED])
def test_calls_inside_reasoning_are_ignored(text: str, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(text, tools)
    assert result.calls == ()
    assert result.retry is False
    assert "shell" in result.reasoning


def test_call_after_reasoning_is_kept(tools: tuple[ToolSpec, ...]) -> None:
    text = f"<think>I should list files with {CALL}</think>\nListing.\n{CALL}"
    result = parse_tool_calls(text, tools)
    assert [(c.name, c.args) for c in result.calls] == [("shell", {"command": "ls"})]
    assert result.text == "Listing."
    assert result.reasoning.startswith("I should list files")


def test_call_after_orphan_close_is_kept(tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(f"need ls</think>{CALL}", tools)
    assert [c.name for c in result.calls] == ["shell"]
    assert result.reasoning == "need ls"
