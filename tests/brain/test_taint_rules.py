"""What taints, as pure rules: a tool's declared output trust (undeclared is untrusted, on
the wire too, so an older runner's tools taint), and the taint kept in the counters a run
saves with every step (the same row a resumed, taken-over or parked run is read from)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether_brain.loop.planned import taints
from tether_brain.state.run import Counters
from tether_brain.tools.helpers import DESCRIPTOR as RUN_AGENT
from tether_common.messages.base import decode
from tether_common.messages.tools import Catalog, ToolDescriptor

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("declared", "expected"),
    [({}, True), ({"output_trust": "untrusted"}, True), ({"output_trust": "trusted"}, False)],
)
def test_only_a_declared_trusted_tool_does_not_taint(
    declared: dict[str, str], expected: bool
) -> None:
    for reach in ("self", "user", "instance", "external"):
        tool = ToolDescriptor(name="t", description="t", parameters=SCHEMA, reach=reach, **declared)
        assert taints(tool) is expected


def test_an_older_runners_catalogue_is_untrusted() -> None:
    """A catalogue entry written before tools declared their output trust."""
    entry = {"name": "shell", "description": "d", "parameters": SCHEMA, "reach": "instance"}
    catalog = decode(Catalog, json.dumps({"version": 1, "tools": [entry]}).encode())
    assert catalog.tools[0].output_trust == "untrusted"
    assert taints(catalog.tools[0])


def test_output_trust_is_a_closed_set() -> None:
    with pytest.raises(ValueError, match="output_trust"):
        ToolDescriptor.model_validate(
            {"name": "t", "description": "t", "parameters": SCHEMA, "output_trust": "mostly"}
        )


def test_run_agent_leaves_taint_to_its_child() -> None:
    assert not taints(RUN_AGENT)


def test_taint_is_saved_with_the_counters() -> None:
    saved = json.loads(json.dumps(Counters(tainted=True, tool_calls=2).to_json()))
    assert Counters.from_json(saved).tainted is True
    assert Counters.from_json({}).tainted is False
