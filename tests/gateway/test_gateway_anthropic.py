"""The `anthropic` adapter against a local server speaking the Messages stream."""

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
from tether_gateway.providers import AnthropicProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, RecordingSleep, Reply, collect, sse

SEARCH = OfferedToolSpec(
    name="web_search",
    description="Search the web.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    },
)


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "provider": "anthropic",
        "model": "claude-test",
        "messages": [
            ChatMessage(role="system", content="You are terse."),
            ChatMessage(role="user", content="News about NATS?"),
        ],
    }
    return GenerateRequest(**{**base, **changes})


def event(kind: str, **data: Any) -> bytes:
    return sse({"type": kind, **data}, event=kind)


def message_start(input_tokens: int = 25) -> bytes:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return event("message_start", message=message)


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return event("content_block_start", index=index, content_block=block)


def delta(index: int, **body: Any) -> bytes:
    return event("content_block_delta", index=index, delta=body)


def block_stop(index: int) -> bytes:
    return event("content_block_stop", index=index)


def message_end(stop_reason: str, output_tokens: int) -> list[bytes]:
    return [
        event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        event("message_stop"),
    ]


def text_reply(*words: str) -> Reply:
    return Reply(
        pieces=[
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            event("ping"),
            *(delta(0, type="text_delta", text=word) for word in words),
            block_stop(0),
            *message_end("end_turn", 15),
        ]
    )


@pytest.fixture
def provider(
    settings: GatewaySettings, client: httpx.AsyncClient, sleep: RecordingSleep
) -> AnthropicProvider:
    return AnthropicProvider(settings, client, sleep=sleep)


def key_of(settings: GatewaySettings) -> str:
    assert settings.anthropic_api_key is not None
    return settings.anthropic_api_key.get_secret_value()


async def test_text_streams_with_usage_from_start_and_delta(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    upstream.queue(text_reply("NATS ", "2.11 is out."))
    events = await collect(provider.generate(request()))
    assert events == [
        ChunkEvent(text="NATS "),
        ChunkEvent(text="2.11 is out."),
        UsageEvent(input_tokens=25, output_tokens=15),
        DoneEvent(finish_reason="stop"),
    ]


async def test_request_has_the_documented_messages_shape(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    """The body and headers the Anthropic SDK's `messages.stream(…)` sends."""
    upstream.queue(text_reply("ok"))
    history = [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="user", content="News about NATS?"),
        ChatMessage(
            role="assistant",
            content="Searching.",
            tool_calls=[CallRecord(id="toolu_1", name="web_search", arguments={"query": "NATS"})],
        ),
        ChatMessage(role="tool", tool_call_id="toolu_1", name="web_search", content="2.11"),
        ChatMessage(role="user", content="And?"),
    ]
    await collect(provider.generate(request(messages=history, tools=[SEARCH])))
    sent = upstream.received[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == key_of(provider.settings)
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.json() == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "News about NATS?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Searching."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "web_search",
                        "input": {"query": "NATS"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2.11"},
                    {"type": "text", "text": "And?"},
                ],
            },
        ],
        "stream": True,
        "tools": [
            {
                "name": "web_search",
                "description": "Search the web.",
                "input_schema": SEARCH.parameters,
            }
        ],
    }


async def test_max_output_tokens_overrides_the_default(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    upstream.queue(text_reply("ok"))
    await collect(provider.generate(request(max_output_tokens=64)))
    assert upstream.received[0].json()["max_tokens"] == 64


async def test_tool_use_is_assembled_from_input_json_deltas(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    tool_use = {"type": "tool_use", "id": "toolu_9", "name": "web_search", "input": {}}
    upstream.queue(
        Reply(
            pieces=[
                message_start(40),
                block_start(0, {"type": "thinking", "thinking": ""}),
                delta(0, type="thinking_delta", thinking="Search first."),
                delta(0, type="signature_delta", signature="EqQBCgIYAhIM"),
                block_stop(0),
                block_start(1, {"type": "text", "text": ""}),
                delta(1, type="text_delta", text="Let me look."),
                block_stop(1),
                block_start(2, tool_use),
                delta(2, type="input_json_delta", partial_json=""),
                delta(2, type="input_json_delta", partial_json='{"query": "NA'),
                delta(2, type="input_json_delta", partial_json='TS 2.11", "cou'),
                delta(2, type="input_json_delta", partial_json='nt": 3}'),
                block_stop(2),
                *message_end("tool_use", 31),
            ],
            gap_s=0.002,
        )
    )
    events = await collect(provider.generate(request(tools=[SEARCH])))
    assert events == [
        ThinkingEvent(text="Search first."),
        ChunkEvent(text="Let me look."),
        ToolCallEvent(
            id="toolu_9", name="web_search", arguments={"query": "NATS 2.11", "count": 3}
        ),
        UsageEvent(input_tokens=40, output_tokens=31),
        DoneEvent(finish_reason="tool_calls"),
    ]


async def test_a_tool_without_arguments_gets_an_empty_object(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    tool_use = {"type": "tool_use", "id": "toolu_2", "name": "web_search", "input": {}}
    upstream.queue(
        Reply(
            pieces=[
                message_start(),
                block_start(0, tool_use),
                block_stop(0),
                *message_end("tool_use", 5),
            ]
        )
    )
    events = await collect(provider.generate(request(tools=[SEARCH])))
    assert events[0] == ToolCallEvent(id="toolu_2", name="web_search", arguments={})


async def test_overloaded_before_any_output_is_retried(
    upstream: FakeUpstream, provider: AnthropicProvider, sleep: RecordingSleep
) -> None:
    overloaded = event("error", error={"type": "overloaded_error", "message": "Overloaded"})
    upstream.queue(Reply(pieces=[message_start(), overloaded]), text_reply("Back."))
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="Back.")
    assert len(sleep.delays) == 1


async def test_an_error_event_after_output_is_reported(
    upstream: FakeUpstream, provider: AnthropicProvider, sleep: RecordingSleep
) -> None:
    overloaded = event("error", error={"type": "overloaded_error", "message": "Overloaded"})
    upstream.queue(
        Reply(
            pieces=[
                message_start(),
                block_start(0, {"type": "text", "text": ""}),
                delta(0, type="text_delta", text="Part"),
                overloaded,
            ]
        )
    )
    events = await collect(provider.generate(request()))
    assert events == [
        ChunkEvent(text="Part"),
        ErrorEvent(
            code="provider_unavailable",
            retryable=True,
            message="anthropic stream reported overloaded_error: Overloaded",
        ),
    ]
    assert sleep.delays == []


async def test_529_uses_retry_after_as_an_http_date(
    upstream: FakeUpstream, provider: AnthropicProvider, sleep: RecordingSleep
) -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    past = "Wed, 21 Oct 2015 07:28:00 GMT"  # already passed: no wait beyond the jitter
    upstream.queue(
        Reply(status=529, headers={"retry-after": past}, pieces=[json.dumps(body).encode()]),
        text_reply("ok"),
    )
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="ok")
    assert len(sleep.delays) == 1
    assert sleep.delays[0] <= provider.retry.base_delay_s


async def test_bad_key_is_an_auth_error_without_the_key(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    key = key_of(provider.settings)
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {key}"}}
    upstream.queue(Reply(status=401, pieces=[json.dumps(body).encode()]))
    events = await collect(provider.generate(request()))
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert (error.code, error.retryable) == ("provider_auth", False)
    assert key not in error.message


async def test_a_dropped_connection_is_reported(
    upstream: FakeUpstream, provider: AnthropicProvider
) -> None:
    upstream.queue(
        Reply(
            pieces=[
                message_start(),
                block_start(0, {"type": "text", "text": ""}),
                delta(0, type="text_delta", text="Half"),
            ],
            end="drop",
        )
    )
    events = await collect(provider.generate(request()))
    assert events[0] == ChunkEvent(text="Half")
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].code == "provider_disconnected"


async def test_unconfigured_anthropic_names_the_key_setting(client: httpx.AsyncClient) -> None:
    events = await collect(AnthropicProvider(GatewaySettings(), client).generate(request()))
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert events[0].code == "provider_not_configured"
    assert "TETHER_GATEWAY_ANTHROPIC_API_KEY" in events[0].message
