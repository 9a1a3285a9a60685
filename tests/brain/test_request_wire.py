"""A step's request on the wire: spliced from the JSON each message got when it was added
to the run, it parses to exactly what dumping the whole request gives, whatever the
history holds; a request whose messages changed since is dumped afresh. After the first
step only what is new goes, after the prefix the gateway keeps (`clients.histories`),
and the gateway makes it whole again."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from tether_brain.clients.histories import GatewayHistories
from tether_brain.context.wire import CarriedRequest, carried
from tether_brain.state.run import Limits, RunState
from tether_common.messages.base import decode, encode
from tether_common.messages.gateway import CallRecord, ChatMessage, GenerateRequest, OfferedToolSpec
from tether_gateway.histories import HistoryCache, expanded

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
        # The same request, asking the gateway to keep its system prompt and history.
        kept = request.model_copy(update={"keep": len(state.messages) + 1})
        assert json.loads(encode(wire)) == json.loads(encode(kept))
        assert GenerateRequest.model_validate_json(encode(wire)) == kept
        assert wire.message_texts() == kept.message_texts()


def test_a_history_loaded_from_the_journal_splices_the_same() -> None:
    state = _state(random.Random(7), 12)
    loaded = RunState(
        "run_w", "the question", "scripted", None, Limits(50), state.created_at, state.updated_at
    )
    for entry in state.pending:
        if entry.kind == "message":
            loaded.replay("message", json.loads(entry.text))
    request = _request(loaded).model_copy(update={"keep": len(loaded.messages) + 1})
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


def _grow(state: RunState, rng: random.Random, i: int) -> None:
    call = CallRecord(id=f"n{i}", name="calculate", arguments={"x": rng.choice(TEXTS), "i": i})
    state.add_message(ChatMessage(role="assistant", content=rng.choice(TEXTS), tool_calls=[call]))
    state.add_message(
        ChatMessage(role="tool", content=rng.choice(TEXTS), tool_call_id=call.id, name=call.name)
    )


def test_steps_go_as_deltas_that_the_gateway_makes_whole_again() -> None:
    """Through the real bytes: each step after the first sends only what is new, and the
    gateway's kept history turns it back into exactly the whole request."""
    for seed in range(10):
        rng = random.Random(seed)
        state = _state(rng, rng.randint(0, 5))
        brain, gateway = GatewayHistories(), HistoryCache(2**24)
        for i in range(12):
            request = carried(_request(state), state)
            out = brain.outgoing(request)
            sent = decode(GenerateRequest, encode(out.sent))
            assert (sent.prefix_digest is None) == (i == 0)
            if i:  # the new step's call and result, and the closing note
                assert len(sent.messages) == 3
                assert out.whole is request
            got = expanded(gateway, sent)
            plain = request.model_copy(update={"keep": None})
            assert json.loads(encode(got)) == json.loads(encode(plain))
            _grow(state, rng, i)


def test_a_request_that_does_not_begin_with_the_kept_history_goes_whole() -> None:
    state = _state(random.Random(1), 3)
    brain = GatewayHistories()
    first = carried(_request(state), state)
    assert brain.outgoing(first).sent.keep == len(state.messages) + 1
    _grow(state, random.Random(2), 0)
    changed = _request(state)
    changed.messages[0] = ChatMessage(role="system", content="rules, changed")
    out = brain.outgoing(carried(changed, state))
    # Whole, and not kept (that costs both sides a hash of all of it): the next step is.
    assert (out.sent.prefix_digest, out.sent.keep, out.whole) == (None, None, None)
    assert out.sent.messages == changed.messages
    again = brain.outgoing(carried(changed, state))
    assert (again.sent.prefix_digest, again.sent.keep) == (None, len(state.messages) + 1)
    # A side generation (no `keep`) goes as it is and leaves the run's kept history.
    side = GenerateRequest(run_id=state.run_id, provider="scripted", messages=changed.messages[:2])
    assert brain.outgoing(side).sent == side
    assert brain.outgoing(carried(changed, state)).sent.prefix_digest is not None


def test_what_the_brain_remembers_is_bounded() -> None:
    brain = GatewayHistories(max_runs=3, max_chars=10**6)
    for n in range(5):
        state = _state(random.Random(n), 2)
        state.run_id = f"run_{n}"
        brain.outgoing(carried(_request(state), state))
    assert len(brain) == 3
    assert brain.chars < 10**6
    small = GatewayHistories(max_chars=1)
    state = _state(random.Random(0), 2)
    small.outgoing(carried(_request(state), state))
    assert (len(small), small.chars) == (0, 0)
