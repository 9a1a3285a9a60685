"""The `openai` adapter against a local server speaking the Chat Completions stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ModelEvent,
    OfferedToolSpec,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.profiles import ModelPrice
from tether_gateway.providers import OpenAIProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, RecordingSleep, Reply, collect, sse

WEATHER = OfferedToolSpec(
    name="get_weather",
    description="Weather now in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "provider": "openai",
        "model": "gpt-test",
        "messages": [
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", content="Weather in Paris?"),
        ],
    }
    return GenerateRequest(**{**base, **changes})


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def usage_chunk(prompt: int, completion: int) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-test",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


DONE = b"data: [DONE]\n\n"


def text_reply(*words: str) -> Reply:
    pieces = [chunk({"role": "assistant", "content": ""})]
    pieces += [chunk({"content": word}) for word in words]
    pieces += [chunk({}, "stop"), usage_chunk(12, 3), DONE]
    return Reply(pieces=pieces)


def kinds(events: list[ModelEvent]) -> list[str]:
    return [event.kind for event in events]


@pytest.fixture
def provider(
    settings: GatewaySettings, client: httpx.AsyncClient, sleep: RecordingSleep
) -> OpenAIProvider:
    return OpenAIProvider(settings, client, sleep=sleep)


async def test_text_streams_as_chunks_then_usage_and_done(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(text_reply("It is ", "sunny."))
    events = await collect(provider.generate(request()))
    assert events == [
        ChunkEvent(text="It is "),
        ChunkEvent(text="sunny."),
        UsageEvent(input_tokens=12, output_tokens=3),
        DoneEvent(finish_reason="stop"),
    ]


def key_of(settings: GatewaySettings) -> str:
    assert settings.openai_api_key is not None
    return settings.openai_api_key.get_secret_value()


async def test_request_has_the_documented_chat_completions_shape(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    """The body fields the OpenAI SDK's `chat.completions.create(stream=True, …)` sends."""
    upstream.queue(text_reply("ok"))
    history = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="Weather in Paris?"),
        ChatMessage(
            role="assistant",
            tool_calls=[CallRecord(id="call_1", name="get_weather", arguments={"city": "Paris"})],
        ),
        ChatMessage(role="tool", tool_call_id="call_1", name="get_weather", content="18C"),
    ]
    await collect(provider.generate(request(messages=history, tools=[WEATHER])))
    sent = upstream.received[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {key_of(provider.settings)}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json() == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather now in a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ],
        "tool_choice": "auto",
    }


async def test_tool_call_deltas_are_assembled_by_index(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    def call_delta(index: int, **function: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, "function": function}]}

    first = {"index": 0, "id": "call_a", "type": "function"}
    second = {"index": 1, "id": "call_b", "type": "function"}
    pieces = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{**first, "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk(call_delta(0, arguments='{"ci')),
        chunk({"tool_calls": [{**second, "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk(call_delta(1, arguments='{"city": "Os')),
        chunk(call_delta(0, arguments='ty": "Paris"}')),
        chunk(call_delta(1, arguments='lo"}')),
        chunk({}, "tool_calls"),
        usage_chunk(40, 22),
        DONE,
    ]
    # Split one SSE event across two network reads as well.
    cut = pieces[2][:9], pieces[2][9:]
    upstream.queue(Reply(pieces=[*pieces[:2], *cut, *pieces[3:]], gap_s=0.005))
    events = await collect(provider.generate(request(tools=[WEATHER])))
    assert events == [
        ToolCallEvent(id="call_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCallEvent(id="call_b", name="get_weather", arguments={"city": "Oslo"}),
        UsageEvent(input_tokens=40, output_tokens=22),
        DoneEvent(finish_reason="tool_calls"),
    ]


async def test_unreadable_call_arguments_end_as_unusable_call(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    bad = {"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": '{"city": '}}
    upstream.queue(Reply(pieces=[chunk({"tool_calls": [bad]}), chunk({}, "length"), DONE]))
    events = await collect(provider.generate(request(tools=[WEATHER])))
    assert kinds(events) == ["usage", "done"]
    assert events[-1] == DoneEvent(finish_reason="unusable_call")


async def test_reasoning_content_becomes_thinking(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(
        Reply(
            pieces=[
                chunk({"role": "assistant", "reasoning_content": "The user wants "}),
                chunk({"reasoning_content": "weather."}),
                chunk({"content": "Sunny."}),
                chunk({}, "stop"),
                DONE,
            ]
        )
    )
    events = await collect(provider.generate(request()))
    assert events[:3] == [
        ThinkingEvent(text="The user wants "),
        ThinkingEvent(text="weather."),
        ChunkEvent(text="Sunny."),
    ]


async def test_missing_usage_is_estimated_and_priced(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    priced = settings.model_copy(
        update={"prices": {"gpt-test": ModelPrice(input_per_million=2, output_per_million=10)}}
    )
    upstream.queue(Reply(pieces=[chunk({"content": "x" * 70}), chunk({}, "stop"), DONE]))
    events = await collect(OpenAIProvider(priced, client).generate(request()))
    usage = events[-2]
    assert isinstance(usage, UsageEvent)
    assert usage.estimated
    assert usage.output_tokens == 20
    assert usage.input_tokens > 0
    assert usage.cost == pytest.approx((usage.input_tokens * 2 + 20 * 10) / 1e6)


async def test_reported_usage_is_priced(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    priced = settings.model_copy(
        update={"prices": {"gpt-test": ModelPrice(input_per_million=1, output_per_million=4)}}
    )
    upstream.queue(text_reply("hi"))
    events = await collect(OpenAIProvider(priced, client).generate(request()))
    assert events[-2] == UsageEvent(input_tokens=12, output_tokens=3, cost=(12 + 12) / 1e6)


@pytest.mark.parametrize(
    ("model", "effort", "expected"),
    [
        ("o-test", "low", {"reasoning_effort": "low", "max_completion_tokens": 50}),
        ("o-test", "normal", {"max_completion_tokens": 50}),
        ("gpt-test", "low", {"max_tokens": 50}),
    ],
)
async def test_effort_is_sent_only_to_reasoning_models(
    upstream: FakeUpstream,
    client: httpx.AsyncClient,
    settings: GatewaySettings,
    model: str,
    effort: str,
    expected: dict[str, Any],
) -> None:
    reasoning = settings.model_copy(update={"openai_reasoning_models": frozenset({"o-test"})})
    upstream.queue(text_reply("ok"))
    await collect(
        OpenAIProvider(reasoning, client).generate(
            request(model=model, effort=effort, max_output_tokens=50)
        )
    )
    body = upstream.received[0].json()
    optional = {"reasoning_effort", "max_tokens", "max_completion_tokens"}
    assert {k: v for k, v in body.items() if k in optional} == expected


async def test_429_waits_as_retry_after_says_then_succeeds(
    upstream: FakeUpstream, provider: OpenAIProvider, sleep: RecordingSleep
) -> None:
    limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
    upstream.queue(
        Reply(
            status=429,
            headers={"content-type": "application/json", "retry-after": "2"},
            pieces=[json.dumps(limited).encode()],
        ),
        text_reply("fine"),
    )
    events = await collect(provider.generate(request()))
    assert kinds(events) == ["chunk", "usage", "done"]
    assert len(upstream.received) == 2
    assert len(sleep.delays) == 1
    assert 2.0 <= sleep.delays[0] <= 2.05


async def test_500_is_retried_up_to_the_limit_then_reported(
    upstream: FakeUpstream, provider: OpenAIProvider, sleep: RecordingSleep
) -> None:
    failing = Reply(status=500, pieces=[b'{"error": {"message": "boom"}}'])
    upstream.queue(failing, failing, failing)
    events = await collect(provider.generate(request()))
    assert len(upstream.received) == 3  # the first try and two retries
    assert len(sleep.delays) == 2
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert (error.code, error.retryable) == ("provider_unavailable", True)
    assert "HTTP 500" in error.message
    assert "boom" in error.message


async def test_400_is_not_retried(
    upstream: FakeUpstream, provider: OpenAIProvider, sleep: RecordingSleep
) -> None:
    body = {"error": {"message": "Unknown parameter: 'foo'.", "type": "invalid_request_error"}}
    upstream.queue(Reply(status=400, pieces=[json.dumps(body).encode()]))
    events = await collect(provider.generate(request()))
    assert events == [
        ErrorEvent(
            code="provider_bad_request",
            retryable=False,
            message="openai answered HTTP 400: Unknown parameter: 'foo'.",
        )
    ]
    assert sleep.delays == []


async def test_an_echoed_api_key_never_reaches_the_error_message(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    key = key_of(provider.settings)
    echo = {"error": {"message": f"Incorrect API key provided: {key}."}}
    upstream.queue(Reply(status=401, pieces=[json.dumps(echo).encode()]))
    events = await collect(provider.generate(request()))
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert error.code == "provider_auth"
    assert not error.retryable
    assert key not in error.message
    assert key not in repr(provider.settings)
    assert "[redacted]" in error.message


async def test_a_stalled_stream_is_cut_after_the_inactivity_timeout(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    quick = settings.model_copy(update={"inactivity_timeout_s": 0.2})
    upstream.queue(Reply(pieces=[chunk({"content": "Thinking about"})], end="stall"))
    events = await collect(OpenAIProvider(quick, client).generate(request()))
    assert events[0] == ChunkEvent(text="Thinking about")
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert (error.code, error.retryable) == ("provider_timeout", True)
    await asyncio.wait_for(upstream.hung_up.wait(), 2)


async def test_a_dropped_connection_mid_stream_is_reported_not_retried(
    upstream: FakeUpstream, provider: OpenAIProvider, sleep: RecordingSleep
) -> None:
    upstream.queue(Reply(pieces=[chunk({"content": "Half an ans"})], end="drop"))
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="Half an ans")
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert (error.code, error.retryable) == ("provider_disconnected", True)
    assert sleep.delays == []


async def test_a_stream_ending_without_done_is_a_disconnect(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(Reply(pieces=[chunk({"content": "Cut"})]))
    events = await collect(provider.generate(request()))
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].code == "provider_disconnected"


async def test_closing_the_generator_closes_the_upstream_stream(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(Reply(pieces=[chunk({"content": "Once upon"})], end="stall"))
    events = provider.generate(request())
    assert await anext(events) == ChunkEvent(text="Once upon")
    await events.aclose()
    await asyncio.wait_for(upstream.hung_up.wait(), 1)


async def test_an_error_object_inside_the_stream_is_reported(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(
        Reply(
            pieces=[
                chunk({"content": "Hel"}),
                sse({"error": {"message": "context length exceeded", "code": 400}}),
            ]
        )
    )
    events = await collect(provider.generate(request()))
    assert events[-1] == ErrorEvent(
        code="provider_error",
        retryable=False,
        message="openai stream reported an error: context length exceeded",
    )


async def test_unconfigured_openai_names_the_settings_to_set(client: httpx.AsyncClient) -> None:
    bare = GatewaySettings(openai_api_key=None)
    events = await collect(OpenAIProvider(bare, client).generate(request()))
    assert len(events) == 1
    error = events[0]
    assert isinstance(error, ErrorEvent)
    assert error.code == "provider_not_configured"
    assert "TETHER_GATEWAY_OPENAI_API_KEY" in error.message


async def test_a_local_server_needs_no_key_and_gets_no_authorization(
    upstream: FakeUpstream, client: httpx.AsyncClient
) -> None:
    local = GatewaySettings(openai_base_url=f"{upstream.url}/v1", openai_model="local-model")
    upstream.queue(text_reply("hi"))
    events = await collect(OpenAIProvider(local, client).generate(request(model=None)))
    assert kinds(events) == ["chunk", "usage", "done"]
    assert "authorization" not in upstream.received[0].headers
    assert upstream.received[0].json()["model"] == "local-model"


async def test_an_unreachable_server_is_retried_then_reported(
    client: httpx.AsyncClient, sleep: RecordingSleep
) -> None:
    async with FakeUpstream() as gone:
        url = gone.url
    nowhere = GatewaySettings(
        openai_base_url=url, openai_api_key=SecretStr("k"), retry_attempts=1, connect_timeout_s=1
    )
    events = await collect(OpenAIProvider(nowhere, client, sleep=sleep).generate(request()))
    assert len(sleep.delays) == 1
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert (error.code, error.retryable) == ("provider_unreachable", True)


async def test_a_stream_item_of_the_wrong_shape_is_a_bad_response(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(Reply(pieces=[sse({"choices": [{"index": 0, "delta": "oops"}]}), DONE]))
    events = await collect(provider.generate(request()))
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert (events[0].code, events[0].retryable) == ("provider_bad_response", False)


async def test_a_stream_item_that_is_not_json_is_a_bad_response(
    upstream: FakeUpstream, provider: OpenAIProvider
) -> None:
    upstream.queue(Reply(pieces=[b"data: {not json\n\n", DONE]))
    events = await collect(provider.generate(request()))
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].code == "provider_bad_response"
