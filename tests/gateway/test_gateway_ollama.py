"""The `ollama` adapter against a local server speaking `/api/chat` as NDJSON."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    OfferedToolSpec,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_gateway.providers import OllamaProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, RecordingSleep, Reply, collect, ndjson

CLOCK = OfferedToolSpec(
    name="current_time",
    description="The time now in a zone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
)
NDJSON = {"content-type": "application/x-ndjson"}


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "provider": "ollama",
        "model": "llama3.2",
        "messages": [ChatMessage(role="user", content="Time in Tokyo?")],
    }
    return GenerateRequest(**{**base, **changes})


def line(message: dict[str, Any]) -> bytes:
    return ndjson(
        {
            "model": "llama3.2",
            "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", **message},
            "done": False,
        }
    )


def final(reason: str = "stop", prompt: int | None = 26, output: int = 9) -> bytes:
    body: dict[str, Any] = {
        "model": "llama3.2",
        "created_at": "2025-01-01T00:00:01Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": reason,
        "done": True,
        "total_duration": 4883583458,
        "load_duration": 1334875,
        "eval_count": output,
        "eval_duration": 4709213000,
    }
    if prompt is not None:
        body["prompt_eval_count"] = prompt
    return ndjson(body)


@pytest.fixture
def provider(
    settings: GatewaySettings, client: httpx.AsyncClient, sleep: RecordingSleep
) -> OllamaProvider:
    return OllamaProvider(settings, client, sleep=sleep)


async def test_text_streams_with_usage_from_the_final_object(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    upstream.queue(
        Reply(
            headers=NDJSON,
            pieces=[
                line({"thinking": "Tokyo is UTC+9."}),
                line({"content": "Ask a tool."}),
                final(),
            ],
        )
    )
    events = await collect(provider.generate(request()))
    assert events == [
        ThinkingEvent(text="Tokyo is UTC+9."),
        ChunkEvent(text="Ask a tool."),
        UsageEvent(input_tokens=26, output_tokens=9),
        DoneEvent(finish_reason="stop"),
    ]


async def test_request_has_the_documented_api_chat_shape(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    upstream.queue(Reply(headers=NDJSON, pieces=[final()]))
    history = [
        ChatMessage(role="user", content="Time in Tokyo?"),
        ChatMessage(
            role="assistant",
            tool_calls=[
                CallRecord(id="c1", name="current_time", arguments={"timezone": "Asia/Tokyo"})
            ],
        ),
        ChatMessage(role="tool", tool_call_id="c1", name="current_time", content="09:00"),
    ]
    await collect(provider.generate(request(messages=history, tools=[CLOCK], max_output_tokens=99)))
    sent = upstream.received[0]
    assert (sent.method, sent.path) == ("POST", "/api/chat")
    assert sent.json() == {
        "model": "llama3.2",
        "messages": [
            {"role": "user", "content": "Time in Tokyo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}}
                ],
            },
            {"role": "tool", "content": "09:00", "tool_name": "current_time"},
        ],
        "stream": True,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "current_time",
                    "description": "The time now in a zone.",
                    "parameters": CLOCK.parameters,
                },
            }
        ],
        "options": {"num_predict": 99},
    }


async def test_tool_calls_arrive_whole_and_get_ids(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    call = {"function": {"name": "current_time", "arguments": {"timezone": "Asia/Tokyo"}}}
    upstream.queue(Reply(headers=NDJSON, pieces=[line({"tool_calls": [call]}), final()]))
    events = await collect(provider.generate(request(tools=[CLOCK])))
    first = events[0]
    assert isinstance(first, ToolCallEvent)
    assert (first.name, first.arguments) == ("current_time", {"timezone": "Asia/Tokyo"})
    assert first.id.startswith("call_")
    assert events[-1] == DoneEvent(finish_reason="tool_calls")


async def test_missing_prompt_count_is_estimated(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    upstream.queue(Reply(headers=NDJSON, pieces=[line({"content": "Hi"}), final(prompt=None)]))
    events = await collect(provider.generate(request()))
    usage = events[-2]
    assert isinstance(usage, UsageEvent)
    assert usage.estimated
    assert usage.output_tokens == 9


async def test_an_unknown_model_is_a_bad_request(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    missing = {"error": "model 'nope' not found, try pulling it first"}
    upstream.queue(Reply(status=404, pieces=[json.dumps(missing).encode()]))
    events = await collect(provider.generate(request(model="nope")))
    assert events == [
        ErrorEvent(
            code="provider_bad_request",
            retryable=False,
            message="ollama answered HTTP 404: model 'nope' not found, try pulling it first",
        )
    ]


async def test_an_error_line_mid_stream_is_reported(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    upstream.queue(Reply(headers=NDJSON, pieces=[line({"content": "A"}), ndjson({"error": "oom"})]))
    events = await collect(provider.generate(request()))
    assert events[-1] == ErrorEvent(
        code="provider_error", retryable=False, message="ollama stream reported an error: oom"
    )


async def test_a_dropped_connection_is_reported(
    upstream: FakeUpstream, provider: OllamaProvider
) -> None:
    upstream.queue(Reply(headers=NDJSON, pieces=[line({"content": "Half"})], end="drop"))
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="Half")
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].code == "provider_disconnected"


async def test_503_then_success(
    upstream: FakeUpstream, provider: OllamaProvider, sleep: RecordingSleep
) -> None:
    upstream.queue(
        Reply(status=503, pieces=[b'{"error": "server busy"}']),
        Reply(headers=NDJSON, pieces=[line({"content": "ok"}), final()]),
    )
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="ok")
    assert len(sleep.delays) == 1


async def test_without_a_model_it_names_the_setting(client: httpx.AsyncClient) -> None:
    events = await collect(OllamaProvider(GatewaySettings(), client).generate(request(model=None)))
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert events[0].code == "provider_not_configured"
    assert "TETHER_GATEWAY_OLLAMA_MODEL" in events[0].message
