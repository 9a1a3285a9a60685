"""The text tool protocol end to end: brain → gateway (`openai` and `local`, text protocol)
→ a fake OpenAI-compatible model that writes its calls as damaged text → tools-runner →
brain. Each run still calls `current_time` and completes, and no call text leaks out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import event_data
from tether_common.toolcalls import TOOL_FENCE
from tether_gateway.testing import FakeUpstream, Reply, chat_text_stream

pytestmark = pytest.mark.e2e

TEXT_MODEL = "tiny-text-model"
PROMPT = "What time is it in Tokyo?"
ANSWER = "It is nine in the morning in Tokyo."
DAMAGED_CALLS = {
    "single-quotes-trailing-commas-in-a-fence": (
        "Let me check.\n```tool\n{'name': 'current_time', 'args': {'timezone': 'Asia/Tokyo',},}\n```"
    ),
    "tool-call-tags-with-a-trailing-comma": (
        '<tool_call>\n{"name": "current_time", "arguments": {"timezone": "Asia/Tokyo",},}\n'
        "</tool_call>"
    ),
    "tags-single-quotes-missing-closers": (
        "<tool_call>{'name': 'current_time', 'arguments': {'timezone': 'Asia/Tokyo'"
    ),
    "unquoted-keys-and-a-string-argument": '```tool\n{name: "current_time", args: "Asia/Tokyo"}\n```',
}
LEAKS = ("```", "<tool_call>", "'name'", '"name"')


def completion_stream(text: str) -> Reply:
    return chat_text_stream(text, TEXT_MODEL)


@pytest.fixture(scope="module")
def stack_extra_env(fake_model: FakeUpstream) -> dict[str, str]:
    return {
        "TETHER_GATEWAY_OPENAI_BASE_URL": f"{fake_model.url}/v1",
        "TETHER_GATEWAY_TEXT_PROTOCOL_MODELS": TEXT_MODEL,
        "TETHER_GATEWAY_LOCAL_BASE_URL": f"{fake_model.url}/v1",
        "TETHER_GATEWAY_LOCAL_MODEL": TEXT_MODEL,
        # The fenced text protocol, not the grammar's one-object reply (tests/models).
        "TETHER_GATEWAY_LOCAL_GRAMMAR": "false",
        # A scripted reply is used once: a retry would hand the next test's reply out.
        "TETHER_GATEWAY_RETRY_ATTEMPTS": "0",
    }


async def run_damaged(
    stack: Supervisor, fake_model: FakeUpstream, damaged: str, **options: Any
) -> tuple[RunView, list[RunEvent]]:
    fake_model.received.clear()
    fake_model.queue(completion_stream(damaged), completion_stream(ANSWER))
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(PROMPT, **options)
        events = [event async for event in client.events(accepted.run_id)]
        return await client.get_run(accepted.run_id), events


def assert_called_the_clock_and_completed(run: RunView, events: list[RunEvent]) -> None:
    assert run.status == "completed", (run.status, run.stop_reason, run.answer)
    assert run.answer == ANSWER
    assert events[0].kind == "run.start"
    assert events[-1].kind == "run.end"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    calls = event_data(events, "tool.call")
    assert [(c["name"], c["arguments"]) for c in calls] == [
        ("current_time", {"timezone": "Asia/Tokyo"})
    ]
    result = event_data(events, "tool.result")[0]
    assert result["ok"] is True
    assert "Asia/Tokyo" in result["content"]
    steps = " ".join(str(e.get("text", "")) for e in event_data(events, "step"))
    assert not [leak for leak in LEAKS if leak in steps + (run.answer or "")]


def assert_taught_the_text_protocol(fake_model: FakeUpstream) -> None:
    first, second = (received.json() for received in fake_model.received)
    assert "tools" not in first  # no native tools for a text-protocol model
    assert first["messages"][0]["role"] == "system"
    assert TOOL_FENCE in first["messages"][0]["content"]
    history = json.dumps(second["messages"])
    assert "Result of current_time" in history
    assert "Asia/Tokyo" in history


@pytest.mark.parametrize("damaged", DAMAGED_CALLS.values(), ids=DAMAGED_CALLS.keys())
async def test_a_damaged_text_call_still_completes_the_run(
    stack: Supervisor, fake_model: FakeUpstream, damaged: str
) -> None:
    run, events = await run_damaged(stack, fake_model, damaged, provider="openai", model=TEXT_MODEL)
    assert_called_the_clock_and_completed(run, events)
    assert_taught_the_text_protocol(fake_model)
    assert fake_model.received[0].json()["model"] == TEXT_MODEL


async def test_the_local_provider_speaks_the_text_protocol(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    damaged = DAMAGED_CALLS["single-quotes-trailing-commas-in-a-fence"]
    run, events = await run_damaged(stack, fake_model, damaged, provider="local")
    assert_called_the_clock_and_completed(run, events)
    assert_taught_the_text_protocol(fake_model)
    first = fake_model.received[0]
    assert first.path == "/v1/chat/completions"
    assert "authorization" not in first.headers  # no key is sent to a local server
    assert first.json()["max_tokens"] >= 1  # a small model is always given a stop
