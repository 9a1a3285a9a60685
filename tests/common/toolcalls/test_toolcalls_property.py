"""Property: `parse_tool_calls` never raises, whatever text a model produces."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from tether_common.toolcalls import ParseResult, ToolSpec, find_call_marker, parse_tool_calls

FRAGMENTS = [
    *("```", "```tool", "```json", "```tool\n", "\n```", "<tool_call>", "</tool_call>"),
    *("<|python_tag|>", "<|eom_id|>", "<function=", "<function=shell>", "</function>"),
    *("<parameter=", "<parameter=command>", "</parameter>", "[TOOL_CALLS]", "[ARGS]"),
    *("<think>", "</think>", "<thinking>", "{", "}", "[", "]", "(", ")", '"', "'", "“", "”"),
    *("‘", "’", ":", ",", ";", "=", "\\", "\\u", "\\ud83d", "//", "/*", "*/", "\n", " "),
    *('"name"', '"args"', '"arguments"', '"shell"', '"command"', "name", "shell", "ls"),
    *("True", "None", "null", "1e999", "-", "9" * 400, "function", '"function"', "tool_calls"),
    *('{"name": "shell", "args": {"command": "ls"}}', "shell(", "calculate", "file_list"),
]

texts = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=30).map("".join),
)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def parser_errors() -> Iterator[list[logging.LogRecord]]:
    """Errors the parser logs when its last-resort boundary catches a bug."""
    handler = _Records()
    logger = logging.getLogger("tether_common.toolcalls.parser")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@settings(max_examples=500, deadline=None)
@given(text=texts)
def test_parse_never_raises(text: str, tools: tuple[ToolSpec, ...]) -> None:
    with parser_errors() as errors:
        result = parse_tool_calls(text, tools)
    assert errors == []  # not even the catch-all was needed
    assert isinstance(result, ParseResult)
    if result.retry:
        assert result.calls == ()
        assert result.problems
    offered = {tool.name for tool in tools}
    assert all(call.name in offered for call in result.calls)
    assert -1 <= find_call_marker(text) < max(len(text), 1)


def test_the_boundary_turns_a_bug_into_text(tools: tuple[ToolSpec, ...]) -> None:
    class Broken:
        name = "broken"

        @property
        def parameters(self) -> dict[str, object]:
            raise RuntimeError("a tool model that cannot describe itself")

    with parser_errors() as errors:
        result = parse_tool_calls(' Hi ```tool\n{"name": "broken"}\n```', [Broken()])
    assert (result.calls, result.retry, result.text) == (
        (),
        True,
        'Hi ```tool\n{"name": "broken"}\n```',
    )
    assert len(errors) == 1


def test_deep_nesting_does_not_overflow(tools: tuple[ToolSpec, ...]) -> None:
    for opener in ("[", "{", '{"a":', "[{"):
        result = parse_tool_calls("```tool\n" + opener * 5000, tools)
        assert result.calls == ()


def test_long_inputs_stay_fast(tools: tuple[ToolSpec, ...]) -> None:
    text = ("{ [ " * 2000) + '{"name": "shell", "args": {"command": "ls"}}'
    assert isinstance(parse_tool_calls(text, tools), ParseResult)
    many = '{"a": "' + "x{" * 20000
    assert parse_tool_calls(many, tools).calls == ()
