"""A step's request on the wire: spliced from the JSON each message got when it was added
to the run, it parses to exactly what dumping the whole request gives, whatever the
history holds; a request whose messages changed since is dumped afresh."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from tether_brain.context.wire import CarriedRequest, carried
from tether_brain.state.run import Limits, RunState
from tether_common.messages.base import encode
from tether_common.messages.gateway import CallRecord, ChatMessage, GenerateRequest, OfferedToolSpec

TEXTS = ["", "plain", 'quotes " and \\ backslashes', "ünïcødé ✓ 日本", "line\nbreak\ttab", "\u2028"]


def _state(rng: random.Random, steps: int) -> RunState:
    now = datetime.now(UTC)
    state = RunState("run_w", "the question", "scripted", None, Limits(50), now, now)
    state.add_message(ChatMessage(role="user", content=rng.choice(TEXTS)))
    for i in range(steps):
        args = {
            "expression": rng.choice(TEXTS),
            "n": rng.randint(-5, 5),
            "deep": {"x": [1.5, None]},
        }
        call = CallRecord(id=f"c{i}", name="calculate", arguments=args)
        state.add_message(
            ChatMessage(role="assistant", content=rng.choice(TEXTS), tool_calls=[call])
        )
        state.add_message(
            ChatMessage(
                role="tool", content=rng.choice(TEXTS), tool_call_id=call.id, name=call.name
            )
        )
    return state


def _request(state: RunState) -> GenerateRequest:
    return GenerateRequest(
        run_id=state.run_id,
        provider=state.provider,
        messages=[
            ChatMessage(role="system", content="rules ✓"),
            *state.messages,
            ChatMessage(role="system", content="Budget left: 3 of 50 steps."),
        ],
        tools=[OfferedToolSpec(name="calculate", description="d", parameters={"type": "object"})],
        tool_choice="required",
    )


def test_the_spliced_request_parses_to_the_whole_dump() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        state = _state(rng, rng.randint(0, 40))
        request = _request(state)
        wire = carried(request, state)
        assert isinstance(wire, CarriedRequest)
        assert json.loads(encode(wire)) == json.loads(encode(request))
        assert GenerateRequest.model_validate_json(encode(wire)) == request


def test_a_history_loaded_from_the_journal_splices_the_same() -> None:
    state = _state(random.Random(7), 12)
    loaded = RunState(
        "run_w", "the question", "scripted", None, Limits(50), state.created_at, state.updated_at
    )
    for entry in state.pending:
        if entry.kind == "message":
            loaded.replay("message", json.loads(entry.text))
    request = _request(loaded)
    assert json.loads(encode(carried(request, loaded))) == json.loads(encode(request))


def test_changed_messages_are_dumped_afresh() -> None:
    state = _state(random.Random(3), 5)
    request = _request(state)
    wire = carried(request, state)
    cut = [m.model_copy(update={"content": "cut"}) for m in request.messages]
    changed = wire.model_copy(update={"messages": cut})
    assert json.loads(encode(changed))["messages"] == [json.loads(m.model_dump_json()) for m in cut]
    # A history that is not the run's (a message left out): not spliced at all.
    other = request.model_copy(update={"messages": request.messages[:2] + request.messages[3:]})
    assert carried(other, state) is other
