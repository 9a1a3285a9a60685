"""Typed answers: what an output schema may be (`schema_problem`, checked when an agent is
applied or a run asks for one), and reading a model's final answer against one
(`read_answer`: the object, or the first `Violation` as a JSON path and a message).

Both sides are hostile input, so both are bounded:
- A schema is JSON Schema 2020-12, checked against its meta-schema, at most
  `MAX_SCHEMA_CHARS` of JSON and `MAX_SCHEMA_DEPTH` levels deep, whose root is an object
  (`"type": "object"`). Nothing is ever downloaded: a `$ref` must point inside the schema
  (`#...`), `$id` (which re-bases references) is refused, and the validator resolves
  references with an empty registry that retrieves nothing (jsonschema's default one
  fetches remote references over HTTP).
- Patterns run on model text, so they must be linear: `pattern` is matched by RE2
  (`tether_common.patterns`; one RE2 cannot compile is refused when the schema is
  checked), and `patternProperties` is refused, since jsonschema matches it (and the
  `additionalProperties` beside it) with Python's backtracking `re`. `format` is an
  annotation only: no format checker runs. `uniqueItems` is checked in linear time.
- An answer is at most `MAX_ANSWER_CHARS` and `MAX_ANSWER_DEPTH` levels deep, with no NaN
  or infinity, no duplicate keys and no number past Python's digit limit; its validation
  stops after `VALIDATION_BUDGET` keyword evaluations (a schema whose `oneOf`s multiply,
  or that recurses into itself, cannot hold a thread).

jsonschema is imported on first use: the client (which reads `AgentConfig`) may run
without it, and then only the brain checks a schema against the meta-schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from tether_common.patterns import PatternProblem, UserPattern, compile_pattern

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "DIALECT",
    "MAX_ANSWER_CHARS",
    "MAX_ANSWER_DEPTH",
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_DEPTH",
    "VALIDATION_BUDGET",
    "Violation",
    "checked_output_schema",
    "read_answer",
    "schema_problem",
    "violation_of",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_SCHEMA_CHARS = 20_000
MAX_SCHEMA_DEPTH = 24
MAX_ANSWER_CHARS = 100_000
MAX_ANSWER_DEPTH = 32
# Keyword evaluations one answer's validation may take: a 2,000-field object checked by
# a plain schema takes ~5,000; past this the schema, not the answer, is the problem.
VALIDATION_BUDGET = 20_000
# Keys that point at other schemas by URI: only the schema's own parts (`#...`).
_REFERENCES = ("$ref", "$dynamicRef")
_REFUSED = {
    "$id": "'$id' is not accepted: references resolve inside the schema only",
    "patternProperties": "'patternProperties' is not accepted (its keys would be matched "
    "by a backtracking regex engine); describe the keys with 'propertyNames' and a "
    "'pattern', or list them under 'properties'",
}
_FENCE_OPEN = "```"
_MESSAGE_CHARS = 300  # a violation's message, cut (it may quote a huge value)


@dataclass(frozen=True, slots=True)
class Violation:
    """Why an answer is not a valid typed answer: where (a JSON path, `$` the whole) and
    what, written for the model that must repair it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# -- schemas


def schema_problem(schema: object) -> str | None:
    """Why `schema` cannot be an output schema, or None when it can."""
    if not isinstance(schema, dict):
        return "an output schema is a JSON object"
    try:
        text = json.dumps(schema, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        return f"the output schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
    except (TypeError, ValueError) as exc:
        return f"an output schema must be plain JSON: {exc}"
    if len(text) > MAX_SCHEMA_CHARS:
        return f"the output schema is {len(text)} characters of JSON; at most {MAX_SCHEMA_CHARS}"
    if schema.get("type") != "object":
        return 'an output schema\'s root must be an object schema ("type": "object")'
    problem = _walk(schema)
    if problem is None:
        problem = _meta_problem(schema)
    return problem


def checked_output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """`schema` if it may be an output schema (a pydantic validator's check: `ValueError`
    naming the problem otherwise)."""
    if schema is not None and (problem := schema_problem(schema)) is not None:
        raise ValueError(problem)
    return schema


def _walk(schema: dict[str, Any]) -> str | None:
    """The first refused part of `schema`, walked without recursion (depth is bounded
    here, before anything recursive reads it)."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            return f"the output schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        if (problem := _node_problem(node)) is not None:
            return problem
        stack.extend((value, depth + 1) for value in node.values())
    return None


def _node_problem(node: dict[str, Any]) -> str | None:
    for key, why in _REFUSED.items():
        if key in node:
            return why
    for key in _REFERENCES:
        target = node.get(key)
        if isinstance(target, str) and not target.startswith("#"):
            return f"'{key}': '{target[:100]}' is not inside the schema; only '#...' is accepted"
    dialect = node.get("$schema")
    if isinstance(dialect, str) and dialect.rstrip("#") != DIALECT:
        return f"'$schema' must be {DIALECT} (JSON Schema 2020-12) or left out"
    pattern = node.get("pattern")
    if isinstance(pattern, str) and isinstance(found := _pattern(pattern), PatternProblem):
        return f"'pattern' {pattern[:100]!r}: {found.message}"
    return None


def _meta_problem(schema: dict[str, Any]) -> str | None:
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
    except ImportError:  # a client without the service extra: the brain checks it
        return None
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return f"not a valid JSON Schema at {error.json_path}: {_cut(error.message)}"
    return None


def _pattern(source: str) -> UserPattern | PatternProblem:
    return compile_pattern(source)


# -- answers


class _OverBudgetError(Exception):
    """The validation ran out of its keyword evaluations."""


@dataclass(slots=True)
class _Checking:
    """One answer's validation: the keyword evaluations left, and its patterns compiled
    once each (never in a process-wide cache: each RE2 may hold megabytes of DFA)."""

    left: int = VALIDATION_BUDGET
    patterns: dict[str, UserPattern | PatternProblem] = field(default_factory=dict)

    def pattern(self, source: str) -> UserPattern | PatternProblem:
        if source not in self.patterns:
            self.patterns[source] = _pattern(source)
        return self.patterns[source]


_CHECKING: ContextVar[_Checking] = ContextVar("typed_answer_checking")


def read_answer(text: str, schemas: Sequence[Mapping[str, Any]]) -> dict[str, Any] | Violation:
    """The answer `text` as the object every one of `schemas` accepts, or why not. The
    text is the JSON object alone, or fenced once in a Markdown code block."""
    value = _parsed(text)
    if isinstance(value, Violation):
        return value
    for schema in schemas:
        if (violation := _violation(value, schema)) is not None:
            return violation
    return value


def _parsed(text: str) -> dict[str, Any] | Violation:
    body = _unfenced(text.strip())
    if len(body) > MAX_ANSWER_CHARS:
        return Violation("$", f"the answer is {len(body)} characters; at most {MAX_ANSWER_CHARS}")
    try:
        value = json.loads(
            body,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_finite,
        )
    except RecursionError:
        return Violation("$", f"the answer nests deeper than {MAX_ANSWER_DEPTH} levels")
    except ValueError as exc:  # JSONDecodeError, a duplicate key, NaN, a 5,000-digit int
        return Violation("$", f"the answer is not a JSON document: {_cut(str(exc))}")
    if not isinstance(value, dict):
        return Violation("$", "the answer must be a JSON object, and nothing else")
    if _depth(value) > MAX_ANSWER_DEPTH:
        return Violation("$", f"the answer nests deeper than {MAX_ANSWER_DEPTH} levels")
    return value


def _unfenced(text: str) -> str:
    """`text` without one Markdown code fence around it (```json ... ```)."""
    if not (text.startswith(_FENCE_OPEN) and text.endswith(_FENCE_OPEN)) or len(text) < 6:
        return text
    first_line_end = text.find("\n")
    if first_line_end < 0:
        return text
    return text[first_line_end + 1 : -len(_FENCE_OPEN)].strip()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key[:100]!r} appears twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return number


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def violation_of(value: dict[str, Any], schema: Mapping[str, Any]) -> Violation | None:
    """Where `value` breaks `schema` (None: it fits), checked as a typed answer is: within
    the budget, RE2 patterns, references inside the schema only (an operator's edited
    tool arguments against the tool's schema, `tether_approvals`)."""
    return _violation(value, schema)


def _violation(value: dict[str, Any], schema: Mapping[str, Any]) -> Violation | None:
    from jsonschema.exceptions import best_match
    from referencing import Registry

    validator = _validator_class()(schema, registry=Registry())
    token = _CHECKING.set(_Checking())
    try:
        error = best_match(validator.iter_errors(value))
    except _OverBudgetError:
        return Violation("$", "the answer could not be checked within the schema's budget")
    except RecursionError:
        return Violation("$", "the answer could not be checked: the schema recurses too deep")
    except Exception as exc:  # an unresolvable reference, say: the schema's fault
        return Violation("$", f"the answer could not be checked: {_cut(str(exc))}")
    finally:
        _CHECKING.reset(token)
    if error is None:
        return None
    return Violation(error.json_path, _cut(error.message))


Keyword = Callable[[Any, Any, Any, Mapping[str, Any]], Iterator[Any] | None]


@cache
def _validator_class() -> type[Validator]:
    """Draft 2020-12 with each keyword counted against the budget, `pattern` matched by
    RE2, and `uniqueItems` in linear time."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    own: dict[str, Keyword] = {"pattern": _re2_pattern, "uniqueItems": _unique_items}
    drafts: dict[str, Keyword] = dict(Draft202012Validator.VALIDATORS)
    keywords = {name: _counted(own.get(name, check)) for name, check in drafts.items()}
    made: type[Validator] = extend(  # type: ignore[no-untyped-call]  # untyped in jsonschema
        Draft202012Validator, validators=keywords
    )
    return made


def _counted(check: Keyword) -> Keyword:
    def counted(
        validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[Any]:
        checking = _CHECKING.get()
        checking.left -= 1
        if checking.left < 0:
            raise _OverBudgetError
        yield from check(validator, value, instance, schema) or ()

    return counted


def _re2_pattern(
    validator: Any, pattern: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not isinstance(pattern, str) or not validator.is_type(instance, "string"):
        return
    compiled = _CHECKING.get().pattern(pattern)
    if isinstance(compiled, PatternProblem):  # refused when the schema was checked
        yield ValidationError(f"the pattern {pattern[:100]!r} cannot be used")
    elif compiled.regex.search(instance) is None:
        yield ValidationError(f"{_cut(repr(instance))} does not match {pattern!r}")


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not unique or not validator.is_type(instance, "array"):
        return
    keys = {json.dumps(_canonical(item), sort_keys=True) for item in instance}
    if len(keys) != len(instance):
        yield ValidationError("the array has non-unique elements")


def _canonical(value: Any) -> Any:
    """`value` as JSON Schema compares it: 1 and 1.0 equal, true and 1 not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
