"""Effort end to end: after a step whose tool calls all succeeded, the brain asks for the
next turn with `low` effort (what is left is to read the results back), which the openai
adapter sends to a reasoning model as `reasoning_effort: low`; after a failed call, or on
the first turn, it asks with normal effort and nothing is sent."""

from __future__ import annotations

from typing import Any

import pytest

from tether_client import TetherClient
from tether_common.supervisor import Supervisor
from tether_gateway.testing import FakeUpstream, chat_call_stream, chat_text_stream

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
