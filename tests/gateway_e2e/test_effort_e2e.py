"""Effort end to end: after a step whose tool calls all succeeded, the brain asks for the
next turn with `low` effort (what is left is to read the results back), which the openai
adapter sends to a reasoning model as `reasoning_effort: low`; after a failed call, or on
the first turn, it asks with normal effort and nothing is sent.

A long run's requests reach the provider whole, each with the history as it stood,
though the brain sends the gateway only each step's new messages; also across a gateway
restart that loses the history the gateway kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import until
from tether_gateway.testing import FakeUpstream, Reply, chat_call_stream, chat_text_stream, sse

pytestmark = pytest.mark.e2e

REASONING_MODEL = "o-effort-test"


@pytest.fixture(scope="module")
def stack_extra_env(fake_model: FakeUpstream) -> dict[str, str]:
    return {
        "TETHER_GATEWAY_OPENAI_BASE_URL": f"{fake_model.url}/v1",
        "TETHER_GATEWAY_OPENAI_REASONING_MODELS": REASONING_MODEL,
        "TETHER_GATEWAY_RETRY_ATTEMPTS": "0",  # a queued reply is used once
    }


async def efforts_asked(
    stack: Supervisor, fake_model: FakeUpstream, arguments: dict[str, Any]
) -> list[str | None]:
    """Run one tool call then an answer; the `reasoning_effort` of the first two model
    requests (after a failed call the brain may ask again, so answers are queued spare)."""
    fake_model.received.clear()
    fake_model.replies.clear()
    fake_model.queue(
        chat_call_stream("current_time", arguments, REASONING_MODEL),
        *(chat_text_stream("Done.", REASONING_MODEL) for _ in range(3)),
    )
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "What time is it?", provider="openai", model=REASONING_MODEL
        )
        results = [e.data async for e in client.events(accepted.run_id) if e.kind == "tool.result"]
        run = await client.get_run(accepted.run_id)
    assert run.status == "completed", (run.status, run.stop_reason)
    assert len(results) == 1
    bodies = [r.json() for r in fake_model.received]
    return [body.get("reasoning_effort") for body in bodies[:2]]


async def test_a_turn_after_successful_calls_asks_for_low_effort(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    efforts = await efforts_asked(stack, fake_model, {"timezone": "Asia/Tokyo"})
    assert efforts == [None, "low"]


async def test_a_turn_after_a_failed_call_asks_for_normal_effort(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    efforts = await efforts_asked(stack, fake_model, {"timezone": "Not/A_Zone"})
    assert efforts == [None, None]


# A long run's history goes to the gateway once and in deltas after (`clients.histories`,
# `tether_gateway.histories`); the provider must still see every request whole.
LONG_MODEL = "history-test"
LONG_CALLS = 14
SLOW_AT = 6  # the request during which the gateway is restarted (losing what it kept)


def call_reply(i: int, gap_s: float = 0.0) -> Reply:
    """Step `i`'s call: `calculate` with an expression of its own, its own call id."""
    call = {
        "index": 0,
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "calculate", "arguments": json.dumps(expression(i))},
    }
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    pieces = [
        chunk({"role": "assistant", "tool_calls": [call]}),
        chunk({}, "tool_calls"),
        sse({"object": "chat.completion.chunk", "choices": [], "usage": usage}),
        sse("[DONE]"),
    ]
    return Reply(pieces=pieces, gap_s=gap_s)


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"object": "chat.completion.chunk", "model": LONG_MODEL, "choices": [choice]})


def expression(i: int) -> dict[str, str]:
    return {"expression": f"{i} + 1000000"}


async def restart_gateway_during(stack: Supervisor, fake_model: FakeUpstream, n: int) -> None:
    """Once the fake holds request `n` (answered slowly), stop the gateway (it finishes
    that answer) and start it again: the history it kept is gone."""
    await until(
        lambda: len(fake_model.received) >= n,
        timeout=60,
        every=0.02,
        what="the run to reach the slow step",
    )
    gateway = stack.child("gateway")
    await stack.stop_child(gateway)
    await stack.start_child(gateway)
    await stack.wait_ready(timeout=60, children=[gateway])


async def test_a_long_run_sends_every_request_whole_to_the_provider_across_a_restart(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    fake_model.received.clear()
    fake_model.replies.clear()
    fake_model.queue(
        *(call_reply(i, gap_s=0.5 if i == SLOW_AT - 1 else 0.0) for i in range(LONG_CALLS)),
        chat_text_stream("All added.", LONG_MODEL),
    )
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "Add them up.", provider="openai", model=LONG_MODEL, max_steps=LONG_CALLS + 1
        )
        await restart_gateway_during(stack, fake_model, SLOW_AT)
        run = await client.wait(accepted.run_id, timeout=120)
    assert run.status == "completed", (run.status, run.stop_reason)
    assert run.answer == "All added."
    bodies = [r.json() for r in fake_model.received]
    assert len(bodies) == LONG_CALLS + 1
    # The restarted gateway did not hold the run's history: it refused the delta once.
    log = (stack.log_dir or Path()) / "gateway.log"
    assert log.read_text().count("prefix_unknown") >= 1
    # Every request carried the whole history as it stood: the system prompt, the
    # question, each earlier call and its result in order, and the closing note.
    system, question = bodies[-1]["messages"][:2]
    assert system["role"] == "system"
    assert question == {"role": "user", "content": "Add them up."}
    for k, body in enumerate(bodies):
        messages = body["messages"]
        assert len(messages) == 2 + 2 * k + 1, k
        assert messages[:2] == [system, question]
        assert messages[-1]["role"] == "system"
        assert "Budget left" in messages[-1]["content"]
        for i in range(k):
            call, result = messages[2 + 2 * i : 4 + 2 * i]
            assert call["role"] == "assistant", (k, i)
            assert len(call["tool_calls"]) == 1, (k, i)
            made = call["tool_calls"][0]
            assert (made["id"], made["function"]["name"]) == (f"call_{i}", "calculate")
            assert json.loads(made["function"]["arguments"]) == expression(i)
            assert (result["role"], result["tool_call_id"]) == ("tool", f"call_{i}")
            assert str(i + 1000000) in result["content"], (k, i, result)
        # The same history as the request before, with one step more: nothing rewritten.
        if k:
            assert messages[:-3] == bodies[k - 1]["messages"][:-1], k
