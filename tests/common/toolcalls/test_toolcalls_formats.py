"""Every accepted call format, alone and mixed, and the visible text left around calls."""

from __future__ import annotations

from typing import Any

import pytest

from tether_common.toolcalls import ToolSpec, parse_tool_calls

Expected = list[tuple[str, dict[str, Any]]]

LS: Expected = [("shell", {"command": "ls"})]
UTC: Expected = [("current_time", {"timezone": "UTC"})]
TWO: Expected = [("shell", {"command": "ls"}), ("calculate", {"expression": "2+2"})]

FORMATS: list[tuple[str, str, Expected]] = [
    # the canonical fence
    ("fence", '```tool\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("fence-prose", 'Let me look.\n```tool\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("fence-inline", '```tool {"name": "shell", "args": {"command": "ls"}}```', LS),
    ("fence-unclosed", '```tool\n{"name": "shell", "args": {"command": "ls"}}', LS),
    ("fence-upper", '```TOOL\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("fence-space", '``` tool\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("fence-close-same-line", '```tool\n{"name": "shell", "args": {"command": "ls"}}```', LS),
    ("fence-tool-call", '```tool_call\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("fence-tool-code", '```tool_code\nshell(command="ls")\n```', LS),
    ("fence-python-call", '```tool\nshell(command="ls")\n```', LS),
    ("fence-name-then-json", '```tool\nshell {"command": "ls"}\n```', LS),
    ("fence-list", '```tool\n[{"name": "shell", "args": {"command": "ls"}}]\n```', LS),
    (
        "fence-backticks-in-arg",
        '```tool\n{"name": "shell", "args": {"command": "echo ```"}}\n```',
        [("shell", {"command": "echo ```"})],
    ),
    ("json-fence-call", '```json\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    ("plain-fence-call", '```\n{"name": "shell", "args": {"command": "ls"}}\n```', LS),
    # <tool_call> (Hermes, Qwen)
    (
        "tool-call-tag",
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>',
        LS,
    ),
    (
        "tool-call-tag-newlines",
        '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>',
        LS,
    ),
    ("tool-call-unclosed", '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}', LS),
    (
        "tool-call-upper",
        '<TOOL_CALL>{"name": "shell", "arguments": {"command": "ls"}}</TOOL_CALL>',
        LS,
    ),
    (
        "tool-call-two",
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>{"name": "calculate", "arguments": {"expression": "2+2"}}</tool_call>',
        TWO,
    ),
    (
        "tool-call-two-unclosed",
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}\n'
        '<tool_call>{"name": "calculate", "arguments": {"expression": "2+2"}}',
        TWO,
    ),
    (
        "tool-call-two-objects",
        '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n'
        '{"name": "calculate", "arguments": {"expression": "2+2"}}\n</tool_call>',
        TWO,
    ),
    (
        "tool-call-json-fence-inside",
        '<tool_call>\n```json\n{"name": "shell", "arguments": {"command": "ls"}}\n```\n</tool_call>',
        LS,
    ),
    (
        "tool-call-qwen-coder",
        "<tool_call>\n<function=shell>\n<parameter=command>\nls\n</parameter>\n"
        "</function>\n</tool_call>",
        LS,
    ),
    # <|python_tag|> (Llama 3.1+)
    (
        "python-tag-json",
        '<|python_tag|>{"name": "shell", "parameters": {"command": "ls"}}',
        LS,
    ),
    (
        "python-tag-eom",
        '<|python_tag|>{"name": "shell", "parameters": {"command": "ls"}}<|eom_id|>',
        LS,
    ),
    ("python-tag-call", '<|python_tag|>shell(command="ls")', LS),
    ("python-tag-single-quotes", "<|python_tag|>shell(command='ls')", LS),
    ("python-tag-positional", '<|python_tag|>shell("ls")', LS),
    (
        "python-tag-builtin",
        '<|python_tag|>brave_search.call(query="rust news")',
        [("web_search", {"query": "rust news"})],
    ),
    (
        "python-tag-two-calls",
        '<|python_tag|>shell(command="ls"); calculate(expression="2+2")',
        TWO,
    ),
    (
        "python-tag-typed-kwargs",
        '<|python_tag|>file_read(path="a.txt", offset=10, limit="20")',
        [("file_read", {"path": "a.txt", "offset": 10, "limit": 20})],
    ),
    (
        "python-tag-unclosed-paren",
        '<|python_tag|>shell(command="ls"',
        LS,
    ),
    # <function=NAME> (Llama 3.x, Qwen3-Coder)
    ("function-json", '<function=shell>{"command": "ls"}</function>', LS),
    ("function-json-unclosed", '<function=shell>{"command": "ls"}', LS),
    ("function-quoted-name", '<function="shell">{"command": "ls"}</function>', LS),
    ("function-empty-args", "<function=current_time></function>", [("current_time", {})]),
    (
        "function-params",
        "<function=shell><parameter=command>ls</parameter></function>",
        LS,
    ),
    (
        "function-params-lines",
        "<function=file_read>\n<parameter=path>\nnotes.md\n</parameter>\n"
        "<parameter=limit>\n5\n</parameter>\n</function>",
        [("file_read", {"path": "notes.md", "limit": 5})],
    ),
    (
        "function-params-multiline-value",
        "<function=shell>\n<parameter=command>\ncd src\nls\n</parameter>\n</function>",
        [("shell", {"command": "cd src\nls"})],
    ),
    (
        "function-params-unclosed",
        "<function=shell>\n<parameter=command>\nls",
        LS,
    ),
    (
        "function-two",
        '<function=shell>{"command": "ls"}</function>\n'
        '<function=calculate>{"expression": "2+2"}</function>',
        TWO,
    ),
    ("function-plain-string", "<function=shell>ls</function>", LS),
    # [TOOL_CALLS] (Mistral)
    ("mistral-list", '[TOOL_CALLS][{"name": "shell", "arguments": {"command": "ls"}}]', LS),
    ("mistral-object", '[TOOL_CALLS] {"name": "shell", "arguments": {"command": "ls"}}', LS),
    (
        "mistral-two",
        '[TOOL_CALLS][{"name": "shell", "arguments": {"command": "ls"}}, '
        '{"name": "calculate", "arguments": {"expression": "2+2"}}]',
        TWO,
    ),
    ("mistral-v11", '[TOOL_CALLS]shell[ARGS]{"command": "ls"}', LS),
    ("mistral-call-id", '[TOOL_CALLS]shell[CALL_ID]a1b2c3d4e[ARGS]{"command": "ls"}', LS),
    (
        "mistral-end-token",
        '[TOOL_CALLS][{"name": "shell", "arguments": {"command": "ls"}}]</s>',
        LS,
    ),
    # bare JSON naming a known tool
    ("bare-object", '{"name": "shell", "args": {"command": "ls"}}', LS),
    ("bare-after-sentence", 'I will list. {"name": "shell", "args": {"command": "ls"}}', LS),
    ("bare-on-own-line", 'Checking.\n{"name": "shell", "args": {"command": "ls"}}\n', LS),
    ("bare-list", '[{"name": "shell", "args": {"command": "ls"}}]', LS),
    (
        "bare-list-two",
        '[{"name": "shell", "args": {"command": "ls"}}, '
        '{"name": "calculate", "args": {"expression": "2+2"}}]',
        TWO,
    ),
    ("bare-flattened", '{"name": "shell", "command": "ls"}', LS),
    ("bare-no-required", '{"name": "file_list"}', [("file_list", {})]),
    # keys: name synonyms, argument synonyms, envelopes
    ("key-arguments", '{"name": "shell", "arguments": {"command": "ls"}}', LS),
    ("key-parameters", '{"name": "shell", "parameters": {"command": "ls"}}', LS),
    ("key-params", '{"name": "shell", "params": {"command": "ls"}}', LS),
    ("key-input", '{"name": "shell", "input": {"command": "ls"}}', LS),
    ("key-tool", '{"tool": "shell", "args": {"command": "ls"}}', LS),
    ("key-tool-name", '{"tool_name": "shell", "tool_input": {"command": "ls"}}', LS),
    ("key-function-string", '{"function": "shell", "arguments": {"command": "ls"}}', LS),
    ("key-action", '{"action": "shell", "action_input": {"command": "ls"}}', LS),
    ("key-action-string", '{"action": "shell", "action_input": "ls"}', LS),
    (
        "openai-function",
        '{"type": "function", "function": {"name": "shell", "arguments": "{\\"command\\": \\"ls\\"}"}}',
        LS,
    ),
    (
        "openai-with-id",
        '{"id": "call_1", "type": "function", "function": {"name": "shell", '
        '"arguments": {"command": "ls"}}}',
        LS,
    ),
    (
        "openai-tool-calls",
        '{"tool_calls": [{"type": "function", "function": {"name": "shell", '
        '"arguments": "{\\"command\\": \\"ls\\"}"}}]}',
        LS,
    ),
    (
        "args-json-string",
        '```tool\n{"name": "shell", "args": "{\\"command\\": \\"ls\\"}"}\n```',
        LS,
    ),
    ("args-plain-string", '```tool\n{"name": "shell", "args": "ls"}\n```', LS),
    ("args-plain-string-sole", '```tool\n{"name": "current_time", "args": "UTC"}\n```', UTC),
    ("args-null", '```tool\n{"name": "file_list", "args": null}\n```', [("file_list", {})]),
    ("args-missing", '```tool\n{"name": "file_list"}\n```', [("file_list", {})]),
    ("args-empty-string", '```tool\n{"name": "file_list", "args": ""}\n```', [("file_list", {})]),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in FORMATS], ids=[case[0] for case in FORMATS]
)
def test_format_yields_calls(text: str, expected: Expected, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(text, tools)
    assert [(call.name, call.args) for call in result.calls] == expected
    assert result.retry is False
    assert result.problems == ()


def test_mixed_formats_in_one_output(tools: tuple[ToolSpec, ...]) -> None:
    text = (
        "First the files.\n"
        '```tool\n{"name": "shell", "args": {"command": "ls"}}\n```\n'
        '<tool_call>{"name": "calculate", "arguments": {"expression": "2+2"}}</tool_call>\n'
        'And the time: {"name": "current_time", "args": {"timezone": "UTC"}}\n'
        '<function=web_search>{"query": "tether"}</function>'
    )
    result = parse_tool_calls(text, tools)
    assert [call.name for call in result.calls] == [
        "shell",
        "calculate",
        "current_time",
        "web_search",
    ]
    assert result.text == "First the files.\n\nAnd the time:"


VISIBLE: list[tuple[str, str, str]] = [
    (
        "prose-around-fence",
        'Let me look.\n```tool\n{"name": "shell", "args": {"command": "ls"}}\n```\nBack soon.',
        "Let me look.\n\nBack soon.",
    ),
    ("only-a-call", '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>', ""),
    (
        "inline-bare",
        'I will call {"name": "shell", "args": {"command": "ls"}} now.',
        "I will call now.",
    ),
    (
        "python-tag-eot",
        'Sure.<|python_tag|>{"name": "shell", "parameters": {"command": "ls"}}<|eot_id|>',
        "Sure.",
    ),
    (
        "mistral-then-text",
        '[TOOL_CALLS][{"name": "shell", "arguments": {"command": "ls"}}] then more',
        "then more",
    ),
    (
        "data-fence-kept",
        'Result:\n```json\n{"a": 1}\n```\n{"name": "shell", "args": {"command": "ls"}}',
        'Result:\n```json\n{"a": 1}\n```',
    ),
    (
        "think-and-call",
        '<think>need ls</think>\nOn it.\n```tool\n{"name": "shell", "args": {"command": "ls"}}\n```',
        "On it.",
    ),
]


@pytest.mark.parametrize(
    ("text", "visible"), [case[1:] for case in VISIBLE], ids=[case[0] for case in VISIBLE]
)
def test_visible_text_has_calls_removed(
    text: str, visible: str, tools: tuple[ToolSpec, ...]
) -> None:
    assert parse_tool_calls(text, tools).text == visible


def test_calls_keep_their_written_order(tools: tuple[ToolSpec, ...]) -> None:
    text = "\n".join(
        f'```tool\n{{"name": "calculate", "args": {{"expression": "{n}+{n}"}}}}\n```'
        for n in range(5)
    )
    result = parse_tool_calls(text, tools)
    assert [call.args["expression"] for call in result.calls] == [f"{n}+{n}" for n in range(5)]


def test_identical_calls_are_all_returned(tools: tuple[ToolSpec, ...]) -> None:
    block = '```tool\n{"name": "shell", "args": {"command": "ls"}}\n```'
    assert len(parse_tool_calls(f"{block}\n{block}", tools).calls) == 2
