"""Compact tool cards for the compact prompt tier: each offered tool cut to one line (the
first sentence of its description and one example call) and a schema that keeps only
what shapes a call (types, enums, required keys), not the prose inside it.

The gates still validate against the tool's full schema from the catalogue, so nothing a
card leaves out is ever relaxed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tether_common.messages.gateway import OfferedToolSpec

SENTENCE_CHARS = 110  # a card's sentence is cut here
# What a call's shape needs from a property; the rest (prose, maximums, formats) is left
# to the gate's full schema. The lower bounds stay: the gateway fits a call to this
# schema and leaves out an optional argument set to a placeholder they rule out
# (`"timeout_s": 0`), which the gate would refuse.
KEPT_KEYS = (
    "type",
    "enum",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "minimum",
    "exclusiveMinimum",
    "minLength",
)
_EXAMPLE = re.compile(r"Example:\s*(?=\{)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_PLACEHOLDERS: dict[str, object] = {
    "string": "text",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}


def compact_card(spec: OfferedToolSpec) -> OfferedToolSpec:
    """`spec` as a one-line card: '<first sentence> Example: {...}'."""
    example = json.dumps(example_of(spec), ensure_ascii=False)
    description = f"{first_sentence(spec.description)} Example: {example}"
    return OfferedToolSpec(
        name=spec.name, description=description, parameters=lean_schema(spec.parameters)
    )


def first_sentence(description: str) -> str:
    text = " ".join(_EXAMPLE.split(description, maxsplit=1)[0].split())
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""
    if len(sentence) > SENTENCE_CHARS:
        sentence = sentence[:SENTENCE_CHARS].rsplit(" ", 1)[0] + "…"
    return sentence


def example_of(spec: OfferedToolSpec) -> dict[str, Any]:
    """The description's own example call when it has one (`Example: {...}`), else one
    made from the schema's required keys."""
    found = _EXAMPLE.search(spec.description)
    if found is not None:
        try:
            value, _ = json.JSONDecoder().raw_decode(spec.description, found.end())
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
    return _made_example(spec.parameters)


def _made_example(schema: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties")
    required = schema.get("required")
    if not isinstance(props, Mapping) or not isinstance(required, list):
        return {}
    example: dict[str, Any] = {}
    for key in required:
        prop = props.get(key)
        if not isinstance(prop, Mapping):
            example[str(key)] = "text"
        elif isinstance(prop.get("enum"), list) and prop["enum"]:
            example[str(key)] = prop["enum"][0]
        else:
            example[str(key)] = _PLACEHOLDERS.get(str(prop.get("type")), "text")
    return example


def lean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with only the keys that shape a call, at every level."""
    lean: dict[str, Any] = {}
    for key in KEPT_KEYS:
        if key not in schema:
            continue
        value = schema[key]
        if key == "properties" and isinstance(value, Mapping):
            lean[key] = {
                name: lean_schema(prop) if isinstance(prop, Mapping) else prop
                for name, prop in value.items()
            }
        elif key == "items" and isinstance(value, Mapping):
            lean[key] = lean_schema(value)
        else:
            lean[key] = value
    return lean
