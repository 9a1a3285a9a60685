"""Damaged JSON that the parser repairs, and JSON that is beyond repair."""

from __future__ import annotations

from typing import Any

import pytest

from tether_common.toolcalls import ToolSpec, parse_tool_calls

REPAIRS: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "smart-double-quotes",
        "{“name”: “shell”, “args”: {“command”: “ls”}}",
        "shell",
        {"command": "ls"},
    ),
    (
        "smart-single-quotes",
        "{‘name’: ‘shell’, ‘args’: {‘command’: ‘ls’}}",
        "shell",
        {"command": "ls"},
    ),
    (
        "smart-open-ascii-close",
        '{“name": “shell", "args": {“command”: “ls"}}',
        "shell",
        {"command": "ls"},
    ),
    (
        "smart-quotes-kept-inside-string",
        '{"name": "shell", "args": {"command": "echo “hi”"}}',
        "shell",
        {"command": "echo “hi”"},
    ),
    ("single-quotes", "{'name': 'shell', 'args': {'command': 'ls'}}", "shell", {"command": "ls"}),
    (
        "apostrophe-in-single-quotes",
        "{'name': 'shell', 'args': {'command': 'echo it's fine'}}",
        "shell",
        {"command": "echo it's fine"},
    ),
    (
        "python-true",
        '{"name": "file_list", "args": {"recursive": True}}',
        "file_list",
        {"recursive": True},
    ),
    (
        "python-false",
        '{"name": "file_list", "args": {"recursive": False}}',
        "file_list",
        {"recursive": False},
    ),
    (
        "python-none-dropped",
        '{"name": "file_read", "args": {"path": "a", "offset": None}}',
        "file_read",
        {"path": "a"},
    ),
    (
        "json-null-dropped",
        '{"name": "file_read", "args": {"path": "a", "limit": null}}',
        "file_read",
        {"path": "a"},
    ),
    ("unquoted-keys", '{name: "shell", args: {command: "ls"}}', "shell", {"command": "ls"}),
    (
        "unquoted-everything",
        "{name: shell, args: {command: ls -la}}",
        "shell",
        {"command": "ls -la"},
    ),
    (
        "trailing-commas",
        '{"name": "shell", "args": {"command": "ls",},}',
        "shell",
        {"command": "ls"},
    ),
    (
        "trailing-comma-array",
        '{"name": "file_list", "args": {"exclude": ["a", "b",]}}',
        "file_list",
        {"exclude": ["a", "b"]},
    ),
    (
        "doubled-commas",
        '{"name": "file_read",, "args": {"path": "a",, "limit": 2}}',
        "file_read",
        {"path": "a", "limit": 2},
    ),
    (
        "missing-one-brace",
        '{"name": "shell", "args": {"command": "ls"}',
        "shell",
        {"command": "ls"},
    ),
    (
        "missing-two-braces",
        '{"name": "shell", "args": {"command": "ls"',
        "shell",
        {"command": "ls"},
    ),
    (
        "missing-bracket",
        '{"name": "file_list", "args": {"exclude": ["a", "b"',
        "file_list",
        {"exclude": ["a", "b"]},
    ),
    (
        "mismatched-closer",
        '{"name": "file_list", "args": {"exclude": ["a", "b"}}',
        "file_list",
        {"exclude": ["a", "b"]},
    ),
    (
        "unterminated-final-string",
        '{"name": "shell", "args": {"command": "ls -la',
        "shell",
        {"command": "ls -la"},
    ),
    (
        "key-cut-off",
        '{"name": "file_read", "args": {"path": "a", "lim',
        "file_read",
        {"path": "a"},
    ),
    (
        "value-cut-off",
        '{"name": "file_read", "args": {"path": "a", "limit":',
        "file_read",
        {"path": "a"},
    ),
    (
        "text-after-object",
        '{"name": "shell", "args": {"command": "ls"}} and then I will read it',
        "shell",
        {"command": "ls"},
    ),
    (
        "line-comment",
        '{"name": "shell", // the tool\n "args": {"command": "ls"}}',
        "shell",
        {"command": "ls"},
    ),
    (
        "block-comment",
        '{"name": "shell", /* why */ "args": {"command": "ls"}}',
        "shell",
        {"command": "ls"},
    ),
    (
        "raw-newline-in-string",
        '{"name": "shell", "args": {"command": "cd src\nls"}}',
        "shell",
        {"command": "cd src\nls"},
    ),
    (
        "escaped-newline",
        '{"name": "shell", "args": {"command": "cd src\\nls"}}',
        "shell",
        {"command": "cd src\nls"},
    ),
    (
        "unicode-escapes",
        '{"name": "shell", "args": {"command": "echo \\u00e9 \\ud83d\\ude00"}}',
        "shell",
        {"command": "echo é 😀"},
    ),
    (
        "lone-surrogate",
        '{"name": "shell", "args": {"command": "echo \\ud83d"}}',
        "shell",
        {"command": "echo \ufffd"},
    ),
    (
        "unescaped-inner-quotes",
        '{"name": "shell", "args": {"command": "echo "hi" there"}}',
        "shell",
        {"command": 'echo "hi" there'},
    ),
    (
        "unescaped-quotes-with-paren",
        '{"name": "shell", "args": {"command": "python -c "print(1)""}}',
        "shell",
        {"command": 'python -c "print(1)"'},
    ),
    (
        "missing-comma-between-lines",
        '{"name": "shell"\n "args": {"command": "ls"}}',
        "shell",
        {"command": "ls"},
    ),
    (
        "args-string-single-quoted-json",
        '{"name": "shell", "args": "{\'command\': \'ls\'}"}',
        "shell",
        {"command": "ls"},
    ),
    (
        "args-string-truncated-json",
        '{"name": "shell", "args": "{\\"command\\": \\"ls"}',
        "shell",
        {"command": "ls"},
    ),
    (
        "equals-separator",
        "{name=shell, args={command=ls}}",
        "shell",
        {"command": "ls"},
    ),
    (
        "number-forms",
        '{"name": "file_read", "args": {"path": "a", "offset": -3, "limit": 1e2}}',
        "file_read",
        {"path": "a", "offset": -3, "limit": 100},
    ),
    (
        "bareword-number-prefix",
        '{"name": "file_read", "args": {path: 2024-report.txt}}',
        "file_read",
        {"path": "2024-report.txt"},
    ),
    (
        "upper-literals",
        '{"name": "file_list", "args": {"recursive": TRUE}}',
        "file_list",
        {"recursive": True},
    ),
]


@pytest.mark.parametrize(
    ("body", "name", "args"), [case[1:] for case in REPAIRS], ids=[case[0] for case in REPAIRS]
)
def test_damage_is_repaired_in_a_fence(
    body: str, name: str, args: dict[str, Any], tools: tuple[ToolSpec, ...]
) -> None:
    result = parse_tool_calls(f"```tool\n{body}\n```", tools)
    assert [(call.name, call.args) for call in result.calls] == [(name, args)]
    assert not result.retry


@pytest.mark.parametrize(
    "body",
    [
        "{“name”: “shell”, “args”: {“command”: “ls”}}",
        "{'name': 'shell', 'args': {'command': 'ls'},}",
        '{name: "shell", args: {command: "ls"}}',
        '{"name": "shell", "args": {"command": "ls"}',
    ],
    ids=["smart", "single-trailing", "unquoted", "missing-brace"],
)
def test_damage_is_repaired_behind_every_marker(body: str, tools: tuple[ToolSpec, ...]) -> None:
    for text in (
        f"<tool_call>{body}</tool_call>",
        f"[TOOL_CALLS][{body}]",
        f"<|python_tag|>{body}",
    ):
        result = parse_tool_calls(text, tools)
        assert [(call.name, call.args) for call in result.calls] == [("shell", {"command": "ls"})]


def test_repaired_bare_object_after_prose(tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls("Let me run it: {'name': 'shell', 'args': {'command': 'ls'},}", tools)
    assert [call.name for call in result.calls] == ["shell"]
    assert result.text == "Let me run it:"


BEYOND_REPAIR = [
    ("value-missing", '```tool\n{"name": "shell", "args": {"command": }}\n```'),
    ("no-json", "```tool\nplease run ls for me\n```"),
    ("empty-fence", "```tool\n```"),
    ("whitespace-fence", "```tool\n   \n```"),
    ("empty-tag", "<tool_call></tool_call>"),
    ("only-a-key", '<tool_call>{"name"}</tool_call>'),
    ("no-name", '<tool_call>{"args": {"colour": "red"}}</tool_call>'),
    ("blank-name", '<tool_call>{"name": " ", "args": {}}</tool_call>'),
    ("name-not-string", '<tool_call>{"name": 5, "args": {}}</tool_call>'),
    ("string-call", '<tool_call>"shell"</tool_call>'),
    ("args-a-list", '<tool_call>{"name": "shell", "args": ["ls", "-la"]}</tool_call>'),
    ("args-for-many-params", '<tool_call>{"name": "file_list", "args": 5}</tool_call>'),
    ("mistral-no-json", "[TOOL_CALLS] sorry"),
    ("mistral-garbage", "[TOOL_CALLS][{: }]"),
    ("function-no-close", "<function=shell"),
    ("function-no-name", '<function=>{"command": "ls"}</function>'),
    ("python-tag-empty", "<|python_tag|>"),
    ("bare-broken-known-tool", 'Run: {"name": "shell", "args": {"command": }}'),
]


@pytest.mark.parametrize(
    "text", [case[1] for case in BEYOND_REPAIR], ids=[c[0] for c in BEYOND_REPAIR]
)
def test_beyond_repair_asks_again(text: str, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(text, tools)
    assert result.calls == ()
    assert result.retry is True
    assert result.problems
