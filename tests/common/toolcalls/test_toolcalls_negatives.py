"""What is not a call, and what a broken or unknown call behind a marker yields."""

from __future__ import annotations

import pytest

from tether_common.toolcalls import ToolSpec, parse_tool_calls

ORDINARY = [
    ("bare-unknown-name", '{"name": "alice", "args": {"age": 3}}'),
    ("bare-person", '{"name": "Alice", "age": 31}'),
    ("bare-data", '{"temperature": 21, "unit": "C"}'),
    ("bare-list-data", "[1, 2, 3]"),
    ("bare-list-of-names", '[{"name": "shell"}, {"name": "calculate"}]'),
    ("after-sentence-unknown", 'Here is the user: {"name": "bob", "arguments": "none"}'),
    ("prose-mention", "I could use file_read to open the file, but it is not needed."),
    ("prose-call-syntax", "You might run shell to list files."),
    ("json-fence-data", '```json\n{"a": 1, "b": [1, 2]}\n```'),
    ("json-fence-unknown", '```json\n{"name": "deploy", "args": {}}\n```'),
    (
        "json-fence-tool-description",
        '```json\n{"name": "shell", "description": "Runs a command"}\n```',
    ),
    ("python-fence", '```python\ncall({"name": "shell", "args": {"command": "ls"}})\n```'),
    ("bash-fence", '```bash\necho \'{"name": "shell", "args": {"command": "ls"}}\'\n```'),
    ("known-name-extra-keys", '{"name": "shell", "args": {"command": "ls"}, "note": "example"}'),
    ("known-name-stray-field", '{"name": "calculate", "version": 2}'),
    ("known-name-missing-required", '{"name": "shell"}'),
    (
        "tool-schema",
        '{"name": "shell", "parameters": {"type": "object", "properties": {"command": {}}}}',
    ),
    ("braces-in-prose", "Use {curly braces} and [brackets] freely."),
    ("markdown-link", "See [the docs](https://example.com) for more."),
    ("set-notation", "The set {1, 2, 3} has three members."),
    ("template", "Hello {name}, your code is {code}."),
    ("empty", ""),
    ("spaces", "   \n  "),
    ("plain-answer", "The capital of France is Paris."),
    ("nested-call-in-data", '{"result": {"name": "shell", "args": {"command": "ls"}}}'),
    ("unclosed-code-fence", "Use ``` to open a fence, e.g. ```python"),
]


@pytest.mark.parametrize("text", [c[1] for c in ORDINARY], ids=[c[0] for c in ORDINARY])
def test_ordinary_answers_yield_no_calls(text: str, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(text, tools)
    assert result.calls == ()
    assert result.retry is False
    assert result.problems == ()
    assert result.text == text.strip()


UNKNOWN = [
    ("fence", '```tool\n{"name": "deploy", "args": {}}\n```'),
    ("tool-call", '<tool_call>{"name": "deploy", "arguments": {}}</tool_call>'),
    ("mistral", '[TOOL_CALLS][{"name": "deploy", "arguments": {}}]'),
    ("mistral-v11", "[TOOL_CALLS]deploy[ARGS]{}"),
    ("function", "<function=deploy>{}</function>"),
    ("function-params", "<function=deploy><parameter=x>1</parameter></function>"),
    ("python-tag", '<|python_tag|>{"name": "deploy", "parameters": {}}'),
    ("python-tag-call", '<|python_tag|>deploy(target="prod")'),
]


@pytest.mark.parametrize("text", [c[1] for c in UNKNOWN], ids=[c[0] for c in UNKNOWN])
def test_unknown_tool_behind_a_marker_asks_again(text: str, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(text, tools)
    assert result.calls == ()
    assert result.retry is True
    assert len(result.problems) == 1
    assert "deploy" in result.problems[0]
    assert "shell" in result.problems[0]  # the corrective message names the valid tools
    assert result.text == ""


def test_one_good_call_beside_a_bad_one_is_no_retry(tools: tuple[ToolSpec, ...]) -> None:
    text = (
        '```tool\n{"name": "deploy", "args": {}}\n```\n'
        '```tool\n{"name": "shell", "args": {"command": "ls"}}\n```'
    )
    result = parse_tool_calls(text, tools)
    assert [c.name for c in result.calls] == ["shell"]
    assert result.retry is False
    assert len(result.problems) == 1


def test_no_tools_offered_makes_every_marked_call_unknown() -> None:
    result = parse_tool_calls('```tool\n{"name": "shell", "args": {"command": "ls"}}\n```', [])
    assert (result.calls, result.retry) == ((), True)
    assert "no tools" in result.problems[0]


def test_no_tools_offered_leaves_bare_json_alone() -> None:
    text = '{"name": "shell", "args": {"command": "ls"}}'
    assert parse_tool_calls(text, []).text == text


def test_marked_block_with_prose_around_keeps_the_prose(tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls("Trying.\n<tool_call>not json at all</tool_call>\nSorry.", tools)
    assert result.retry is True
    assert result.text == "Trying.\n\nSorry."
