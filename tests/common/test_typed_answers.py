"""Typed answers (`tether_common.typed_answers`): which output schemas are refused and
why, and a model's answer read against one — what passes, what is named as a violation
(path and message), and hostile answers and schemas that must stay cheap."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from tether_common.messages.agents import AgentConfig
from tether_common.messages.runs import StartRun
from tether_common.typed_answers import (
    MAX_ANSWER_CHARS,
    MAX_SCHEMA_CHARS,
    Violation,
    read_answer,
    schema_problem,
)


class Item(BaseModel):
    name: str = Field(pattern=r"^[a-z]+$")
    qty: int = Field(ge=1)


class Order(BaseModel):
    order_id: str
    items: list[Item]


ORDER = Order.model_json_schema()
OBJECT: dict[str, Any] = {"type": "object"}
# Slower than this for one answer means something grew super-linear.
CHEAP_S = 2.0


def test_a_pydantic_models_schema_is_accepted_and_reads_a_fitting_answer() -> None:
    assert schema_problem(ORDER) is None
    answer = '{"order_id": "o1", "items": [{"name": "tea", "qty": 2}]}'
    assert read_answer(answer, [ORDER]) == {
        "order_id": "o1",
        "items": [{"name": "tea", "qty": 2}],
    }


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"a": 1}\n```',
        '```\n{"a": 1}\n```',
        '  {"a": 1}\n',
    ],
)
def test_one_code_fence_around_the_object_is_read_past(text: str) -> None:
    assert read_answer(text, [OBJECT]) == {"a": 1}


@pytest.mark.parametrize(
    ("answer", "path", "said"),
    [
        (
            '{"order_id": "o1", "items": [{"name": "tea", "qty": "2"}]}',
            "$.items[0].qty",
            "'2' is not of type 'integer'",
        ),
        (
            '{"order_id": "o1", "items": [{"name": "Tea", "qty": 2}]}',
            "$.items[0].name",
            "does not match",
        ),
        (
            '{"order_id": "o1", "items": [{"name": "tea", "qty": 0}]}',
            "$.items[0].qty",
            "less than the minimum",
        ),
        ('{"items": []}', "$", "'order_id' is a required property"),
        ('{"order_id": 5, "items": []}', "$.order_id", "5 is not of type 'string'"),
    ],
)
def test_a_violation_names_its_path_and_what_is_wrong(answer: str, path: str, said: str) -> None:
    found = read_answer(answer, [ORDER])
    assert isinstance(found, Violation), found
    assert found.path == path
    assert said in found.message
    assert str(found).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("The order is o1.", "not a JSON document"),
        ("[1, 2]", "must be a JSON object"),
        ('"just a string"', "must be a JSON object"),
        ('{"a": 1} and more', "not a JSON document"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": Infinity}', "Infinity is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": 1e999}', "out of range"),
        ('{"a": ' + "9" * 5000 + "}", "not a JSON document"),
        ('{"a": ' + "[" * 10_000 + "]" * 10_000 + "}", "nests deeper"),
        ('{"a": ' + '{"b": ' * 40 + "1" + "}" * 40 + "}", "nests deeper"),
        ('{"a": "' + "x" * MAX_ANSWER_CHARS + '"}', "characters; at most"),
        ("", "not a JSON document"),
    ],
    ids=[
        "prose",
        "array",
        "string",
        "trailing",
        "duplicate-key",
        "nan",
        "infinity",
        "minus-infinity",
        "overflow",
        "huge-int",
        "deep-arrays",
        "deep-objects",
        "huge",
        "empty",
    ],
)
def test_hostile_answers_are_violations_not_crashes(text: str, said: str) -> None:
    started = time.monotonic()
    found = read_answer(text, [OBJECT])
    assert isinstance(found, Violation), found
    assert found.path == "$"
    assert said in found.message
    assert time.monotonic() - started < CHEAP_S


def test_every_schema_must_accept_the_answer() -> None:
    # A run's own schema beside its agent's: neither loosens the other.
    agents = {"type": "object", "required": ["a"]}
    runs = {"type": "object", "required": ["b"]}
    assert read_answer('{"a": 1, "b": 2}', [agents, runs]) == {"a": 1, "b": 2}
    only_b = read_answer('{"b": 2}', [agents, runs])
    assert isinstance(only_b, Violation)
    assert "'a' is a required property" in only_b.message
    only_a = read_answer('{"a": 1}', [agents, runs])
    assert isinstance(only_a, Violation)
    assert "'b' is a required property" in only_a.message


def test_unique_items_is_linear_and_compares_as_json_schema_does() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
    many = json.dumps({"a": [{"i": i} for i in range(5000)]})
    started = time.monotonic()
    assert isinstance(read_answer(many, [schema]), dict)
    assert time.monotonic() - started < CHEAP_S
    same = read_answer('{"a": [{"i": 1}, {"i": 1.0}]}', [schema])
    assert isinstance(same, Violation)
    assert same.path == "$.a"
    assert read_answer('{"a": [1, true]}', [schema]) == {"a": [1, True]}


def test_a_pattern_is_matched_in_linear_time() -> None:
    # Catastrophic for Python's re (2^n); RE2 answers at once.
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    assert schema_problem(schema) is None
    started = time.monotonic()
    found = read_answer(json.dumps({"a": "a" * 50_000 + "!"}), [schema])
    assert isinstance(found, Violation)
    assert found.path == "$.a"
    assert time.monotonic() - started < CHEAP_S


@pytest.mark.parametrize(
    "schema",
    [
        # oneOf at every level: 2^depth evaluations without a budget.
        {
            "type": "object",
            "$defs": {
                "n": {
                    "oneOf": [
                        {"type": "array", "items": {"$ref": "#/$defs/n"}},
                        {"type": "array", "items": {"$ref": "#/$defs/n"}},
                    ]
                }
            },
            "properties": {"a": {"$ref": "#/$defs/n"}},
        },
        # A reference to itself that never reaches a leaf.
        {"type": "object", "$ref": "#"},
    ],
    ids=["one-of-bomb", "self-reference"],
)
def test_a_costly_schema_stops_within_its_budget(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None  # valid JSON Schema: the budget is what bounds it
    started = time.monotonic()
    found = read_answer('{"a": ' + "[" * 30 + "]" * 30 + "}", [schema])
    assert isinstance(found, Violation)
    assert "could not be checked" in found.message
    assert time.monotonic() - started < CHEAP_S


BAD_SCHEMAS: list[tuple[str, Any, str]] = [
    ("not-an-object", ["type", "object"], "is a JSON object"),
    ("root-not-object", {"type": "array"}, "root must be an object schema"),
    ("root-untyped", {"properties": {}}, "root must be an object schema"),
    (
        "meta-schema",
        {"type": "object", "properties": {"a": {"type": 12}}},
        "not a valid JSON Schema",
    ),
    ("meta-required", {"type": "object", "required": "a"}, "not a valid JSON Schema"),
    (
        "remote-ref",
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
        "not inside the schema",
    ),
    (
        "metadata-ref",
        {"type": "object", "$ref": "http://169.254.169.254/latest/meta-data"},
        "not inside the schema",
    ),
    ("relative-ref", {"type": "object", "$ref": "other.json#/a"}, "not inside the schema"),
    ("file-ref", {"type": "object", "$ref": "file:///etc/passwd"}, "not inside the schema"),
    (
        "dynamic-ref",
        {"type": "object", "$dynamicRef": "https://example.com/s#meta"},
        "not inside the schema",
    ),
    ("id", {"type": "object", "$id": "https://example.com/root"}, "'$id' is not accepted"),
    ("nested-id", {"type": "object", "$defs": {"x": {"$id": "x.json"}}}, "'$id' is not accepted"),
    (
        "other-dialect",
        {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"},
        "2020-12",
    ),
    (
        "pattern-properties",
        {"type": "object", "patternProperties": {"^a": {}}},
        "'patternProperties' is not accepted",
    ),
    (
        "backreference",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a)\\1"}}},
        "backreferences",
    ),
    (
        "lookahead",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)a"}}},
        "lookahead",
    ),
    (
        "bad-regex",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a"}}},
        "pattern",
    ),
    (
        "too-deep",
        {"type": "object", "properties": {"a": json.loads('{"items":' * 30 + "{}" + "}" * 30)}},
        "nests deeper",
    ),
    ("too-large", {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}, "at most"),
]


@pytest.mark.parametrize(
    ("schema", "said"), [b[1:] for b in BAD_SCHEMAS], ids=[b[0] for b in BAD_SCHEMAS]
)
def test_bad_output_schemas_are_refused_with_a_reason(schema: Any, said: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None
    assert said in problem
    if isinstance(schema, dict):  # and so where a definition or a run carries one
        with pytest.raises(ValidationError, match="output_schema"):
            AgentConfig(output_schema=schema)
        with pytest.raises(ValidationError, match="output_schema"):
            StartRun(prompt="p", output_schema=schema)


def test_a_schema_nested_past_the_interpreters_limit_is_refused_not_raised() -> None:
    schema: dict[str, Any] = {"type": "object"}
    inner = schema
    for _ in range(5000):  # as a YAML file may build it, past json's recursion limit
        inner["not"] = {}
        inner = inner["not"]
    problem = schema_problem(schema)
    assert problem is not None
    assert "nests deeper" in problem


def test_an_agent_carries_its_schema_and_repairs() -> None:
    agent = AgentConfig(output_schema=ORDER)
    assert agent.output_schema == ORDER
    assert agent.output_repairs == 2
    with pytest.raises(ValidationError):
        AgentConfig(output_schema=ORDER, output_repairs=6)
