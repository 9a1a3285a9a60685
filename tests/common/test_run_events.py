"""Typed run events (tether_common.messages.events): one model per kind, read back from
the wire format stored journals already hold, emitted by the brain with exactly the
fields it set, and read by the client through the union."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, get_args

import pytest

from tether_brain.state.events import emit
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_client.render import render, style
from tether_common.messages.events import (
    EventData,
    Guard,
    RunEndEvent,
    ToolDeniedEvent,
    ToolResultEvent,
    TypedEvent,
    typed,
)
from tether_common.messages.runs import RunEvent, RunEventKind

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# Events as brains before the typed models wrote them (field names and shapes on the wire).
STORED: list[tuple[RunEventKind, dict[str, Any]]] = [
    ("run.start", {"prompt": "hi", "provider": "rules", "model": None}),
    ("step", {"step": 1, "kind": "model", "text": "", "thinking": "hmm"}),
    ("tool.call", {"step": 1, "call_id": "c1", "name": "calc", "arguments": {"x": 1}}),
    (
        "tool.result",
        {
            "step": 1,
            "call_id": "c1",
            "name": "calc",
            "ok": True,
            "error_code": None,
            "content": "2",
            "cached": False,
            "duration_ms": 1.5,
            "depth": 1,
        },
    ),
    ("tool.denied", {"step": 1, "call_id": "c2", "name": "rm", "code": "denied_by_grant"}),
    ("guard", {"step": 2, "kind": "loop_broken", "trigger": "repeated_call", "name": "calc"}),
    ("usage", {"input_tokens": 3, "output_tokens": 4, "cost": 0.0, "estimated": True}),
    (
        "run.end",
        {
            "status": "completed",
            "stop_reason": None,
            "answer": "2",
            "steps": 2,
            "usage": {"input_tokens": 3, "output_tokens": 4, "cost": 0.0, "estimated": True},
        },
    ),
]


def _event(kind: RunEventKind, data: dict[str, Any], seq: int = 1) -> RunEvent:
    return RunEvent(run_id="run_x", seq=seq, kind=kind, ts=NOW, data=data)


def test_every_kind_has_one_model() -> None:
    union = get_args(get_args(TypedEvent)[0])
    kinds = [get_args(cls.model_fields["kind"].annotation)[0] for cls in union]
    assert sorted(kinds) == sorted(get_args(RunEventKind))
    data_kinds = {cls.model_fields["data"].annotation.KIND for cls in union}
    assert data_kinds == set(get_args(RunEventKind))


@pytest.mark.parametrize(("kind", "data"), STORED)
def test_stored_events_load_and_dump_as_they_were(kind: RunEventKind, data: dict[str, Any]) -> None:
    read = typed(_event(kind, data))
    assert read.kind == kind
    assert read.data.model_dump(mode="json", exclude_unset=True) == data


def test_unknown_fields_are_kept_not_refused() -> None:
    read = typed(_event("guard", {"step": 1, "kind": "new_rule", "extra": [1, 2]}))
    assert read.data.model_dump(exclude_unset=True)["extra"] == [1, 2]


def test_the_brain_emits_exactly_the_fields_it_set() -> None:
    state = RunState(
        run_id="run_x",
        prompt="p",
        provider="rules",
        model=None,
        limits=Limits(max_steps=3),
        created_at=NOW,
        updated_at=NOW,
        options=RunOptions(),
        fence=1,
    )
    first = emit(state, Guard(step=1, kind="waiting", service="gateway", wait_s=2.0))
    assert first.kind == "guard"
    assert first.data == {"step": 1, "kind": "waiting", "service": "gateway", "wait_s": 2.0}
    state.depth = 1
    second = emit(state, Guard(step=1, kind="not_done"))
    assert (second.seq, second.data) == (2, {"step": 1, "kind": "not_done", "depth": 1})
    # Serialised once: the journal's text is what the bus carries.
    assert [json.loads(e.text)["seq"] for e in state.pending if e.kind == "event"] == [1, 2]


def test_the_client_reads_events_through_the_union() -> None:
    result = typed(_event("tool.result", dict(STORED[3][1], ok=False)))
    assert isinstance(result, ToolResultEvent)
    assert style(_event("tool.result", dict(STORED[3][1], ok=False))) == "red"
    end = _event("run.end", STORED[-1][1])
    assert isinstance(typed(end), RunEndEvent)
    assert render(end) == "■ completed\n2"
    assert isinstance(typed(_event("tool.denied", STORED[4][1])), ToolDeniedEvent)


def test_data_a_kind_cannot_hold_is_shown_raw_not_dropped() -> None:
    broken = _event("tool.result", {"ok": "not a bool", "name": ["x"]})
    assert render(broken) == '  [tool.result] {"ok": "not a bool", "name": ["x"]}'


def test_each_data_model_names_its_kind() -> None:
    assert all(hasattr(cls, "KIND") for cls in EventData.__subclasses__())
