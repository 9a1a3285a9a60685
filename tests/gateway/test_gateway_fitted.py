"""A native call fitted to the offered tools: one written as it stands passes through as
the same event; one the fitting changed, even only in a value's type, is copied."""

from __future__ import annotations

from typing import Any

import pytest

from tether_common.messages.gateway import OfferedToolSpec, ToolCallEvent
from tether_common.scripted import fitted

SWITCH = OfferedToolSpec(
    name="switch",
    description="",
    parameters={
        "type": "object",
        "properties": {
            "on": {"type": "boolean"},
            "level": {"type": "integer"},
            "gain": {"type": "number"},
        },
        "additionalProperties": False,
    },
)


def event(name: str, arguments: dict[str, Any]) -> ToolCallEvent:
    return ToolCallEvent(id="c1", name=name, arguments=arguments)


def test_a_call_written_as_it_stands_is_passed_on_as_it_is() -> None:
    written = event("switch", {"on": True, "level": 3, "gain": -0.0})
    assert fitted(written, [SWITCH]) is written


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [({"on": 1}, {"on": True}), ({"level": 5.0}, {"level": 5}), ({"level": "5"}, {"level": 5})],
)
def test_a_value_fitted_to_its_type_is_passed_on_fitted(
    arguments: dict[str, Any], expected: dict[str, Any]
) -> None:
    out = fitted(event("switch", arguments), [SWITCH])
    assert isinstance(out, ToolCallEvent)
    assert out.arguments == expected
    assert [type(v) for v in out.arguments.values()] == [type(v) for v in expected.values()]


def test_a_renamed_call_is_passed_on_renamed_with_its_repair() -> None:
    out = fitted(event("swich", {"on": True}), [SWITCH])
    assert isinstance(out, ToolCallEvent)
    assert out.name == "switch"
    assert out.repairs == ["tool name 'swich' read as 'switch'"]
