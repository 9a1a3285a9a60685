"""Arguments fitted to the schema: types, key synonyms, unknown keys; and name aliases."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether_common.toolcalls import DEFAULT_ALIASES, ParseResult, ToolSpec, parse_tool_calls

THERMOSTAT = ToolSpec(
    "thermostat",
    {
        "type": "object",
        "properties": {
            "celsius": {"type": "number"},
            "on": {"type": "boolean"},
            "rooms": {"type": "array", "items": {"type": "integer"}},
            "mode": {"type": "string", "enum": ["Eco", "Comfort"]},
            "note": {"type": ["string", "null"]},
            "file": {"type": "string"},
            "schedule": {
                "type": "object",
                "properties": {"hour": {"type": "integer"}},
                "additionalProperties": False,
            },
        },
        "required": [],
        "additionalProperties": False,
    },
)


def call(tools: tuple[ToolSpec, ...], name: str, args: object) -> ParseResult:
    body = json.dumps({"name": name, "args": args})
    return parse_tool_calls(f"```tool\n{body}\n```", (*tools, THERMOSTAT))


COERCIONS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("int-from-string", "file_read", {"path": "a", "limit": "5"}, {"path": "a", "limit": 5}),
    ("int-from-signed", "file_read", {"path": "a", "offset": "-3"}, {"path": "a", "offset": -3}),
    (
        "int-from-float-string",
        "file_read",
        {"path": "a", "limit": "5.0"},
        {"path": "a", "limit": 5},
    ),
    ("int-from-float", "file_read", {"path": "a", "limit": 5.0}, {"path": "a", "limit": 5}),
    ("int-spaces", "file_read", {"path": "a", "limit": " 7 "}, {"path": "a", "limit": 7}),
    (
        "int-kept-when-not-numeric",
        "file_read",
        {"path": "a", "limit": "all"},
        {"path": "a", "limit": "all"},
    ),
    (
        "int-not-from-fraction",
        "file_read",
        {"path": "a", "limit": "2.5"},
        {"path": "a", "limit": "2.5"},
    ),
    ("int-not-from-bool", "file_read", {"path": "a", "limit": True}, {"path": "a", "limit": True}),
    ("number-from-string", "thermostat", {"celsius": "2.5"}, {"celsius": 2.5}),
    ("number-from-int-string", "thermostat", {"celsius": "21"}, {"celsius": 21}),
    ("number-int-kept", "thermostat", {"celsius": 21}, {"celsius": 21}),
    ("number-not-nan", "thermostat", {"celsius": "nan"}, {"celsius": "nan"}),
    ("bool-true", "file_list", {"recursive": "true"}, {"recursive": True}),
    ("bool-yes", "file_list", {"recursive": "yes"}, {"recursive": True}),
    ("bool-upper", "file_list", {"recursive": "TRUE"}, {"recursive": True}),
    ("bool-on", "thermostat", {"on": "on"}, {"on": True}),
    ("bool-one", "thermostat", {"on": 1}, {"on": True}),
    ("bool-false", "file_list", {"recursive": "false"}, {"recursive": False}),
    ("bool-no", "file_list", {"recursive": "no"}, {"recursive": False}),
    ("bool-zero-string", "file_list", {"recursive": "0"}, {"recursive": False}),
    ("bool-unclear-kept", "file_list", {"recursive": "maybe"}, {"recursive": "maybe"}),
    ("array-from-csv", "file_list", {"exclude": "a,b"}, {"exclude": ["a", "b"]}),
    ("array-from-csv-spaces", "file_list", {"exclude": " a , b ,"}, {"exclude": ["a", "b"]}),
    (
        "array-from-one-string",
        "file_list",
        {"exclude": "node_modules"},
        {"exclude": ["node_modules"]},
    ),
    ("array-from-json-string", "file_list", {"exclude": '["a", "b"]'}, {"exclude": ["a", "b"]}),
    ("array-from-empty-string", "file_list", {"exclude": ""}, {"exclude": []}),
    ("array-from-number", "file_list", {"exclude": 5}, {"exclude": ["5"]}),
    ("array-items-coerced", "thermostat", {"rooms": ["1", 2, "3"]}, {"rooms": [1, 2, 3]}),
    ("array-csv-items-coerced", "thermostat", {"rooms": "1, 2"}, {"rooms": [1, 2]}),
    ("array-single-int", "thermostat", {"rooms": "4"}, {"rooms": [4]}),
    ("string-from-int", "shell", {"command": 5}, {"command": "5"}),
    ("string-from-float", "calculate", {"expression": 2.5}, {"expression": "2.5"}),
    ("string-from-bool", "current_time", {"timezone": True}, {"timezone": "true"}),
    ("enum-case", "thermostat", {"mode": "eco"}, {"mode": "Eco"}),
    ("enum-unknown-kept", "thermostat", {"mode": "turbo"}, {"mode": "turbo"}),
    ("nullable-keeps-null", "thermostat", {"note": None}, {"note": None}),
    ("nullable-from-string", "thermostat", {"note": 3}, {"note": "3"}),
    ("nested-object", "thermostat", {"schedule": {"hour": "7", "x": 1}}, {"schedule": {"hour": 7}}),
    ("object-from-string", "thermostat", {"schedule": '{"hour": "8"}'}, {"schedule": {"hour": 8}}),
    ("unknown-key-dropped", "shell", {"command": "ls", "cwd": "/"}, {"command": "ls"}),
    ("all-unknown-dropped", "current_time", {"city": "Paris"}, {}),
    ("null-optional-dropped", "file_read", {"path": "a", "limit": None}, {"path": "a"}),
]


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [case[1:] for case in COERCIONS],
    ids=[case[0] for case in COERCIONS],
)
def test_values_are_coerced_to_the_schema(
    name: str, args: dict[str, Any], expected: dict[str, Any], tools: tuple[ToolSpec, ...]
) -> None:
    result = call(tools, name, args)
    assert [(c.name, c.args) for c in result.calls] == [(name, expected)]


SYNONYMS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("file_read", {"file": "a"}, {"path": "a"}),
    ("file_read", {"filename": "a"}, {"path": "a"}),
    ("file_read", {"file_path": "a"}, {"path": "a"}),
    ("file_read", {"filePath": "a"}, {"path": "a"}),
    ("file_read", {"Path": "a"}, {"path": "a"}),
    ("file_list", {"directory": "src"}, {"path": "src"}),
    ("shell", {"cmd": "ls"}, {"command": "ls"}),
    ("shell", {"command_line": "ls", "timeout_seconds": "9"}, {"command": "ls", "timeout": 9}),
    ("web_search", {"q": "x", "num_results": "3"}, {"query": "x", "count": 3}),
    ("web_search", {"search_query": "x"}, {"query": "x"}),
    ("current_time", {"tz": "UTC"}, {"timezone": "UTC"}),
    ("current_time", {"zone": "UTC"}, {"timezone": "UTC"}),
    ("current_time", {"time-zone": "UTC"}, {"timezone": "UTC"}),
    ("calculate", {"expr": "1+1"}, {"expression": "1+1"}),
    ("file_list", {"recurse": "yes", "ignore": "a,b"}, {"recursive": True, "exclude": ["a", "b"]}),
    # the real key wins over a synonym, and a synonym that is itself a parameter stays
    ("file_read", {"path": "a", "file": "b"}, {"path": "a"}),
    ("file_read", {"file": "b", "path": "a"}, {"path": "a"}),
    ("thermostat", {"file": "x"}, {"file": "x"}),
]


@pytest.mark.parametrize(("name", "args", "expected"), SYNONYMS)
def test_key_synonyms_map_onto_existing_keys(
    name: str, args: dict[str, Any], expected: dict[str, Any], tools: tuple[ToolSpec, ...]
) -> None:
    assert [c.args for c in call(tools, name, args).calls] == [expected]


ALIASES = [
    ("read_file", "file_read"),
    ("readfile", "file_read"),
    ("READ_FILE", "file_read"),
    ("Read-File", "file_read"),
    ("read file", "file_read"),
    ("FileRead", "file_read"),
    ("list_files", "file_list"),
    ("ls", "file_list"),
    ("bash", "shell"),
    ("sh", "shell"),
    ("run_command", "shell"),
    ("execute_command", "shell"),
    ("terminal", "shell"),
    ("google", "web_search"),
    ("search", "web_search"),
    ("websearch", "web_search"),
    ("web-search", "web_search"),
    ("time", "current_time"),
    ("get_time", "current_time"),
    ("get_current_time", "current_time"),
    ("calculator", "calculate"),
    ("calc", "calculate"),
    ("math", "calculate"),
    ("functions.shell", "shell"),
    ("Shell", "shell"),
]


@pytest.mark.parametrize(("alias", "tool"), ALIASES)
def test_aliases_resolve_to_offered_tools(
    alias: str, tool: str, tools: tuple[ToolSpec, ...]
) -> None:
    result = parse_tool_calls(
        f'<tool_call>{{"name": "{alias}", "arguments": {{}}}}</tool_call>', tools
    )
    assert [c.name for c in result.calls] == [tool]


def test_default_table_holds_the_documented_aliases() -> None:
    expected = {
        "read_file": "file_read",
        "write_file": "file_write",
        "list_files": "file_list",
        "search_files": "file_search",
        "grep": "file_search",
        "edit_file": "file_edit",
        "bash": "shell",
        "google": "web_search",
        "fetch": "web_fetch",
        "browse": "web_fetch",
        "get_url": "web_fetch",
        "get_current_time": "current_time",
        "calc": "calculate",
    }
    assert {alias: DEFAULT_ALIASES[alias] for alias in expected} == expected


@pytest.mark.parametrize("alias", ["write_file", "grep", "fetch", "edit_file"])
def test_alias_of_a_tool_not_offered_is_unknown(alias: str, tools: tuple[ToolSpec, ...]) -> None:
    result = parse_tool_calls(f'```tool\n{{"name": "{alias}", "args": {{}}}}\n```', tools)
    assert result.calls == ()
    assert result.retry is True
    assert alias in result.problems[0]


def test_caller_aliases_extend_the_table(tools: tuple[ToolSpec, ...]) -> None:
    text = '```tool\n{"name": "peek", "args": {"path": "a"}}\n```'
    result = parse_tool_calls(text, tools, aliases={"peek": "file_read", "nowhere": "missing"})
    assert [(c.name, c.args) for c in result.calls] == [("file_read", {"path": "a"})]


def test_caller_aliases_override_defaults(tools: tuple[ToolSpec, ...]) -> None:
    text = '```tool\n{"name": "search", "args": {"path": "a"}}\n```'
    result = parse_tool_calls(text, tools, aliases={"search": "file_list"})
    assert [c.name for c in result.calls] == ["file_list"]


def test_a_tools_own_aliases_apply() -> None:
    tool = ToolSpec("deploy", {"type": "object", "properties": {}}, aliases=("ship", "Roll Out"))
    for name in ("ship", "roll_out", "deploy"):
        result = parse_tool_calls(f'```tool\n{{"name": "{name}"}}\n```', [tool])
        assert [c.name for c in result.calls] == ["deploy"]


def test_an_offered_name_beats_an_alias() -> None:
    search = ToolSpec("search", {"type": "object", "properties": {}})
    web = ToolSpec("web_search", {"type": "object", "properties": {}})
    result = parse_tool_calls('```tool\n{"name": "search"}\n```', [web, search])
    assert [c.name for c in result.calls] == ["search"]


SLEEPER = ToolSpec(
    "sleeper",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
            "limit": {"type": "integer", "minimum": 1},
            "offset": {"type": "integer", "minimum": 0},
            "path": {"type": "string", "minLength": 1},
            "note": {"type": "string"},
            "count": {"type": "integer", "minimum": 1},
        },
        "required": ["command", "count"],
        "additionalProperties": False,
    },
)


@pytest.mark.parametrize(
    ("args", "kept", "left_out"),
    [
        # 0 where more than 0 is needed, "" where text is needed: optional, so not set.
        ({"timeout_s": 0}, {}, ["timeout_s"]),
        ({"timeout_s": 0.0, "limit": 0}, {}, ["timeout_s", "limit"]),
        ({"limit": "0"}, {}, ["limit"]),  # coerced first, then seen as unset
        ({"path": ""}, {}, ["path"]),
        # Values the schema allows stay, and so does anything that is not a placeholder.
        ({"timeout_s": 5, "offset": 0, "note": ""}, {"timeout_s": 5, "offset": 0, "note": ""}, []),
        ({"limit": -3}, {"limit": -3}, []),  # a wrong value, not "unset": the gate says so
        ({"timeout_s": False}, {"timeout_s": False}, []),
    ],
)
def test_an_optional_argument_set_to_a_placeholder_is_left_out(
    args: dict[str, Any], kept: dict[str, Any], left_out: list[str]
) -> None:
    body = json.dumps({"name": "sleeper", "args": {"command": "ls", "count": 2} | args})
    [parsed] = parse_tool_calls(f"```tool\n{body}\n```", (SLEEPER,)).calls
    assert parsed.args == {"command": "ls", "count": 2} | kept
    said = [r for r in parsed.repairs if "left out" in r]
    assert [r.split("'")[1] for r in said] == left_out, parsed.repairs


def test_a_required_argument_is_never_left_out() -> None:
    body = json.dumps({"name": "sleeper", "args": {"command": "", "count": 0}})
    [parsed] = parse_tool_calls(f"```tool\n{body}\n```", (SLEEPER,)).calls
    assert parsed.args == {"command": "", "count": 0}  # the schema gate names the problem
