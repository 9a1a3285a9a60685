"""The quick check of plain arguments never lets through what jsonschema refuses (every
property schema of a grid against every edge value), and it does answer for the built-in
tools' ordinary calls, so jsonschema is skipped there."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tether_tools_runner.plain_args import compile_check
from tether_tools_runner.sandbox.attest import Attestation
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tools import Builtins

LENGTHS: list[Any] = [None, 0, 2, 4, -1, 1.5, True]
BOUNDS: list[Any] = [None, -1, 0, 5, 4.5, -0.0, math.inf, math.nan, True, "1"]
NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _set(schema: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return schema if value is None else {**schema, key: value}


def _grid() -> list[Any]:
    strings = [
        _set(_set({"type": "string"}, "minLength", low), "maxLength", high)
        for low, high in itertools.product(LENGTHS, LENGTHS)
    ]
    numbers = [
        _set({"type": kind, "description": "n"}, key, bound)
        for kind, key, bound in itertools.product(("integer", "number"), NUMBER_KEYS, BOUNDS)
    ]
    numbers.append({"type": "integer", "minimum": 0, "maximum": 5})
    numbers.append({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 5})
    scalars = [*strings, *numbers, {"type": "boolean"}, {"type": "boolean", "default": 1}]
    odd = [True, False, {}, {"type": ["string", "null"]}, {"enum": [1]}, {"type": "null"}]
    odd += [{"type": "string", "pattern": "a"}, {"type": "string", "format": "email"}]
    odd += [{"type": "boolean", "enum": [False]}, {"type": "integer", "multipleOf": 2}]
    arrays = [{"type": "array"}, *({"type": "array", "items": s} for s in scalars + odd)]
    return [*scalars, *odd, *arrays]


LEAVES: list[Any] = [0, 1, -1, 5, 6, 2**70, 1.0, 1.5, -0.0, 4.5, 4.999, 5.0, 0.5]
LEAVES += [math.inf, -math.inf, math.nan, True, False, None, "", "a", "ab", "abcd"]
LEAVES += ["abcde", "\U0001f600\U0001f600", {}, {"a": 1}]
VALUES = [*LEAVES, [], *([leaf] for leaf in LEAVES), [1, "a"], [1, 2.5], ["ab", "abcde"]]


@pytest.mark.parametrize("prop", _grid(), ids=repr)
def test_a_quick_yes_is_always_jsonschemas_yes(prop: Any) -> None:
    schema = {"type": "object", "properties": {"a": prop}, "additionalProperties": False}
    check = compile_check(schema)
    if check is None:
        return
    validator = Draft202012Validator(schema)
    for value in VALUES:
        if check({"a": value}):
            assert validator.is_valid({"a": value}), value


OBJECTS: list[dict[str, Any]] = [
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "object", "properties": {}, "required": ["b"], "additionalProperties": True},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {}, "minProperties": 1},
    {"type": "object", "required": "a"},
    {"properties": {}},
]
ARGS: list[Any] = [{}, {"a": "x"}, {"a": 1}, {"b": 1}, {"a": "x", "b": None}, [], "a", None, 1]


@pytest.mark.parametrize("schema", OBJECTS, ids=repr)
def test_the_object_keywords_are_met_as_jsonschema_meets_them(schema: dict[str, Any]) -> None:
    check = compile_check(schema)
    if check is None:
        return
    validator = Draft202012Validator(schema)
    for args in ARGS:
        if check(args):
            assert validator.is_valid(args), args


def test_the_builtin_tools_ordinary_calls_take_the_quick_way(tmp_path: Path) -> None:
    builtins = Builtins(RunnerSettings(workspace=tmp_path), Attestation(level="none", bwrap=None))
    schemas = {tool.name: tool.descriptor.parameters for tool in builtins.tools()}
    calls: dict[str, dict[str, Any]] = {
        "calculate": {"expression": "2 + 2"},
        "file_read": {"path": "a.txt", "offset": 1, "limit": 20},
        "file_search": {"pattern": "x", "regex": True, "path": "src"},
        "shell": {"command": "ls"},
        "web_search": {"query": "tether"},
    }
    for name, args in calls.items():
        check = compile_check(schemas[name])
        assert check is not None, name
        assert check(args), name
        assert not check({**args, "unknown": 1}), name
