"""Fits parsed arguments to a tool's JSON Schema: key synonyms, unknown keys, value types.

Coercion converts only what is unambiguous (`"5"` for an integer, `"yes"` for a boolean,
`"a,b"` for an array of strings). A value it cannot convert is left as it is, so the
brain's schema validation reports it to the model instead of the parser guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from tether_common.toolcalls.aliases import KEY_SYNONYMS, normalize_key
from tether_common.toolcalls.repair import parse_number, read_json

__all__ = ["coerce_args", "coerce_args_noted", "coerce_value", "synonym_target"]

_TRUE: Final = frozenset({"true", "yes", "y", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "n", "off", "0"})
_NULL: Final = frozenset({"null", "none", "nil"})


class _NoConversion:
    """Marks a conversion that does not apply (None is a real value, so it cannot)."""


_NO: Final = _NoConversion()
_Converter = Callable[[object, Mapping[str, Any]], object]


def coerce_args(args: Mapping[str, object], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Rename synonym keys, drop unknown ones, convert each value to its property's type."""
    return coerce_args_noted(args, schema)[0]


def coerce_args_noted(
    args: Mapping[str, object], schema: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """`coerce_args`, and what it changed beyond value types: keys renamed or dropped."""
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return dict(args), []
    # Strict schemas say `additionalProperties: false`; keep extras only when told to.
    extras = schema.get("additionalProperties")
    keep_unknown = extras is True or isinstance(extras, Mapping)
    notes: list[str] = []
    renamed = _rename_keys(args, props, keep_unknown=keep_unknown, notes=notes)
    coerced = {
        key: coerce_value(value, props.get(key))
        for key, value in renamed.items()
        if value is not None or _allows_null(props.get(key))
    }
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    for key in [k for k, v in coerced.items() if k not in needed and _unset(v, props.get(k))]:
        notes.append(f"argument {key!r}={coerced.pop(key)!r} left out (the tool's default)")
    return coerced, notes


def _unset(value: object, schema: object) -> bool:
    """An optional argument a model filled with a placeholder its schema rules out: `0`
    where more than 0 is needed (`"timeout_s": 0`), `""` where text is needed. It can
    only mean "not set", so it is left out and the tool's default applies (a small model
    writes every argument it is shown)."""
    if not isinstance(schema, Mapping):
        return False
    if value == "" and isinstance(schema.get("minLength"), int) and schema["minLength"] > 0:
        return True
    if not isinstance(value, int | float) or isinstance(value, bool) or value != 0:
        return False
    floor, above = schema.get("minimum"), schema.get("exclusiveMinimum")
    return (isinstance(floor, int | float) and floor > 0) or (
        isinstance(above, int | float) and above <= 0
    )


def _allows_null(schema: object) -> bool:
    """Models write `null` for an optional argument they mean to leave out."""
    return not isinstance(schema, Mapping) or "null" in _kinds(schema) or not _kinds(schema)


def _rename_keys(
    args: Mapping[str, object],
    props: Mapping[str, Any],
    *,
    keep_unknown: bool,
    notes: list[str] | None = None,
) -> dict[str, object]:
    out = {key: value for key, value in args.items() if key in props}
    said = notes if notes is not None else []
    for key, value in args.items():
        if key in props:
            continue
        target = synonym_target(key, props, taken=(*args, *out))
        if target is not None:
            out[target] = value
            said.append(f"argument {key!r} read as {target!r}")
        elif keep_unknown:
            out[key] = value
        else:
            said.append(f"unknown argument {key!r} dropped")
    return out


def synonym_target(key: str, props: Mapping[str, Any], *, taken: Iterable[str]) -> str | None:
    """The schema key that `key` means (`filePath` → `file_path`, `expr` → `expression`),
    when the schema has it and no other argument already gave it; else None."""
    normal = normalize_key(key)
    used = set(taken)
    for target in (normal, KEY_SYNONYMS.get(normal)):
        if target is not None and target in props and target not in used:
            return target
    return None


def coerce_value(value: object, schema: object) -> object:
    """`value` converted to the type `schema` asks for, or unchanged when that is unclear."""
    if not isinstance(schema, Mapping):
        return value
    value = _match_enum(value, schema)
    kinds = _kinds(schema)
    for kind in kinds:
        if _is_kind(value, kind):
            return _coerce_inside(value, kind, schema)
    for kind in kinds:
        converter = _CONVERTERS.get(kind)
        converted = _NO if converter is None else converter(value, schema)
        if converted is not _NO:
            return converted
    return value


def _kinds(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [item for item in kind if isinstance(item, str)]
    if "properties" in schema:
        return ["object"]
    return ["array"] if "items" in schema else []


def _is_kind(value: object, kind: str) -> bool:
    if kind in ("integer", "number", "boolean") and isinstance(value, bool):
        return kind == "boolean"
    checks: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "array": list,
        "object": dict,
        "null": type(None),
    }
    expected = checks.get(kind)
    return expected is not None and isinstance(value, expected)


def _coerce_inside(value: object, kind: str, schema: Mapping[str, Any]) -> object:
    """A value of the right type may still hold wrong ones (array items, object members)."""
    if kind == "array" and isinstance(value, list):
        return [coerce_value(item, schema.get("items")) for item in value]
    if kind == "object" and isinstance(value, dict) and "properties" in schema:
        return coerce_args({str(key): item for key, item in value.items()}, schema)
    return value


def _match_enum(value: object, schema: Mapping[str, Any]) -> object:
    options = schema.get("enum")
    if not isinstance(value, str) or not isinstance(options, list) or value in options:
        return value
    wanted = value.strip().lower()
    for option in options:
        if isinstance(option, str) and option.lower() == wanted:
            return option
    return value


def _to_integer(value: object, _schema: Mapping[str, Any]) -> object:
    number = parse_number(value) if isinstance(value, str) else value
    if isinstance(number, float) and number.is_integer():
        return int(number)
    if isinstance(number, int) and not isinstance(number, bool):
        return number
    return _NO


def _to_number(value: object, _schema: Mapping[str, Any]) -> object:
    number = parse_number(value) if isinstance(value, str) else None
    return _NO if number is None else number


def _to_boolean(value: object, _schema: Mapping[str, Any]) -> object:
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else _NO
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return _NO


def _to_string(value: object, _schema: Mapping[str, Any]) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _NO


def _to_array(value: object, schema: Mapping[str, Any]) -> object:
    items = schema.get("items")
    if isinstance(value, str):
        text = value.strip()
        read = read_json(text) if text.startswith("[") else None
        if read is not None and isinstance(read[0], list):
            return [coerce_value(item, items) for item in read[0]]
        parts = [part.strip() for part in text.split(",")]
        return [coerce_value(part, items) for part in parts if part]
    if value is None:
        return _NO
    return [coerce_value(value, items)]  # a single value where a list belongs


def _to_object(value: object, schema: Mapping[str, Any]) -> object:
    if not isinstance(value, str) or not value.strip().startswith("{"):
        return _NO
    read = read_json(value.strip())
    if read is None or not isinstance(read[0], dict):
        return _NO
    return _coerce_inside(read[0], "object", schema)


def _to_null(value: object, _schema: Mapping[str, Any]) -> object:
    return None if isinstance(value, str) and value.strip().lower() in _NULL else _NO


_CONVERTERS: Final[dict[str, _Converter]] = {
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "string": _to_string,
    "array": _to_array,
    "object": _to_object,
    "null": _to_null,
}
