"""A quick yes for tool arguments that plainly fit a simple schema, before jsonschema.

Most tool schemas are flat objects of strings, booleans and numbers with bounds. Checking
such arguments directly takes about a microsecond, where jsonschema's validator takes
~11 µs (3% of the tools-runner's CPU per call). The check is sound, never complete: it
compiles only schemas whose every keyword it knows, and answers True only when each is
met in the plainest way (an integer is an `int`, never `1.0`; a number is finite).
Anything else answers False, and the caller then asks jsonschema, which has the last
word and writes the errors.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

__all__ = ["Check", "compile_check"]

Check = Callable[[object], bool]

# Annotations: they never change whether a value is valid.
_NOTES: Final = frozenset({"description", "title", "default", "examples", "$comment"})
_BOUNDS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "minimum": operator.ge,
    "maximum": operator.le,
    "exclusiveMinimum": operator.gt,
    "exclusiveMaximum": operator.lt,
}
_OBJECT_KEYS: Final = frozenset({"type", "properties", "required", "additionalProperties"})


def compile_check(schema: object) -> Check | None:
    """A check for an object schema of plain properties, or None when the schema has
    anything else (then only jsonschema can say)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    if not set(schema) - _NOTES <= _OBJECT_KEYS:
        return None
    props, required = schema.get("properties", {}), schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(props, Mapping) or not _strings(required) or not isinstance(closed, bool):
        return None
    checks: dict[str, Check] = {}
    for name, sub in props.items():
        check = _value_check(sub)
        if check is None:
            return None
        checks[name] = check
    return _object_check(checks, tuple(required), open_=closed)


def _object_check(checks: Mapping[str, Check], required: tuple[str, ...], *, open_: bool) -> Check:
    def check(args: object) -> bool:
        if not isinstance(args, dict) or any(key not in args for key in required):
            return False
        for key, value in args.items():
            fits = checks.get(key)
            if fits is None:
                if not open_:
                    return False
            elif not fits(value):
                return False
        return True

    return check


def _value_check(schema: object) -> Check | None:
    if not isinstance(schema, Mapping):
        return None  # a boolean schema: rare, left to jsonschema
    keys = set(schema) - _NOTES
    match schema.get("type"):
        case "string" if keys <= {"type", "minLength", "maxLength"}:
            return _string_check(schema.get("minLength", 0), schema.get("maxLength"))
        case "boolean" if keys == {"type"}:
            return lambda value: value is True or value is False
        case "integer" if keys <= {"type", *_BOUNDS}:
            return _number_check(schema, integer=True)
        case "number" if keys <= {"type", *_BOUNDS}:
            return _number_check(schema, integer=False)
        case "array" if keys <= {"type", "items"}:
            if "items" not in schema:
                return _array_check(None)
            items = _value_check(schema["items"])
            return None if items is None else _array_check(items)
        case _:
            return None


def _string_check(low: object, high: object) -> Check | None:
    if not _count(low) or not (high is None or _count(high)):
        return None
    shortest, longest = cast(int, low), cast(int | None, high)

    def check(value: object) -> bool:
        # JSON Schema counts code points, as `len` does.
        if not isinstance(value, str):
            return False
        return shortest <= len(value) and (longest is None or len(value) <= longest)

    return check


def _number_check(schema: Mapping[str, Any], *, integer: bool) -> Check | None:
    bounds = [(_BOUNDS[key], schema[key]) for key in _BOUNDS if key in schema]
    if not all(_finite(bound) for _, bound in bounds):
        return None

    def check(value: object) -> bool:
        if type(value) is not int and (integer or type(value) is not float):
            return False  # a bool, 1.0 for an integer, or not a number: jsonschema decides
        if type(value) is float and not math.isfinite(value):
            return False
        return all(holds(value, bound) for holds, bound in bounds)

    return check


def _array_check(items: Check | None) -> Check:
    def check(value: object) -> bool:
        return isinstance(value, list) and (items is None or all(items(item) for item in value))

    return check


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _finite(value: object) -> bool:
    return type(value) is int or (type(value) is float and math.isfinite(value))


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
