"""The `openai` adapter (and `local`, its text-protocol form) against a real peer: llama.cpp's
server on SmolLM2-135M. The protocol is asserted — streaming, events, usage, completion,
cancellation, errors — never the model's answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import httpx
import pytest

from tether_client.local_model import DEFAULT_ALIAS, LlamaServer
from tether_common.messages.gateway import (
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
from tether_gateway.providers import OpenAIProvider
from tether_gateway.providers.local import LocalProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import collect

CLOCK = OfferedToolSpec(
    name="current_time",
    description="The time now in an IANA time zone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def settings(llama: LlamaServer) -> GatewaySettings:
    return GatewaySettings(
        openai_base_url=llama.base_url,
        openai_model=DEFAULT_ALIAS,
        local_base_url=llama.base_url,
        retry_attempts=0,
        inactivity_timeout_s=60.0,
    )


def request(prompt: str = "Say hello.", **changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-llama",
        "provider": "openai",
        "max_output_tokens": 24,
        "messages": [
            ChatMessage(role="system", content="You are brief."),
            ChatMessage(role="user", content=prompt),
        ],
    }
    return GenerateRequest(**{**base, **changes})


def assert_well_formed(events: list[ModelEvent]) -> UsageEvent:
    """Text and calls, then one usage report, then one `done`; the usage it carries."""
    *body, usage, done = events
    assert isinstance(done, DoneEvent)
    assert isinstance(usage, UsageEvent)
    assert all(isinstance(e, ChunkEvent | ThinkingEvent | ToolCallEvent) for e in body)
    assert usage.input_tokens > 0
    return usage


async def test_a_reply_streams_in_pieces_and_ends_with_usage_and_done(
    llama: LlamaServer, http: httpx.AsyncClient
) -> None:
    events = await collect(OpenAIProvider(settings(llama), http).generate(request()))
    usage = assert_well_formed(events)
    chunks = [e for e in events if isinstance(e, ChunkEvent)]
    assert len(chunks) >= 2  # token by token, not one block at the end
    assert "".join(c.text for c in chunks).strip()
    assert 1 <= usage.output_tokens <= 24 + 2
    # llama.cpp's server ignores `stream_options.include_usage`: usage is estimated, marked.
    assert usage.estimated is True
    assert events[-1] == DoneEvent(finish_reason="stop") or events[-1] == DoneEvent(
        finish_reason="length"
    )


async def test_the_output_cap_ends_a_long_reply_with_length(
    llama: LlamaServer, http: httpx.AsyncClient
) -> None:
    long = request("Write a long story about a lighthouse keeper.", max_output_tokens=8)
    events = await collect(OpenAIProvider(settings(llama), http).generate(long))
    assert_well_formed(events)
    assert events[-1] == DoneEvent(finish_reason="length")


async def test_closing_the_stream_early_frees_the_server(
    llama: LlamaServer, http: httpx.AsyncClient
) -> None:
    provider = OpenAIProvider(settings(llama), http)
    story = request("Write a long story about a lighthouse keeper.", max_output_tokens=400)
    async with aclosing(provider.generate(story)) as events:
        async for event in events:
            if isinstance(event, ChunkEvent):
                break  # the brain stopped the run: the HTTP stream is closed here
    after = await collect(provider.generate(request()))
    assert_well_formed(after)


async def test_a_prompt_past_the_window_is_an_error_event(
    llama: LlamaServer, http: httpx.AsyncClient
) -> None:
    huge = request("word " * 6000)
    events = await collect(OpenAIProvider(settings(llama), http).generate(huge))
    # llama-cpp-python checks the window only once the stream has begun, so it answers
    # 200 with an empty body: the adapter reports the stream cut before `[DONE]`.
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    assert events[0].code == "provider_disconnected"


async def test_the_local_provider_offers_tools_as_text_and_ends_well_formed(
    llama: LlamaServer, http: httpx.AsyncClient
) -> None:
    ask = request(
        "What time is it in Tokyo? Call the tool.",
        provider="local",
        tools=[CLOCK],
        max_output_tokens=64,
    )
    events = await collect(LocalProvider(settings(llama), http).generate(ask))
    assert_well_formed(events)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.finish_reason in ("stop", "length", "tool_calls", "unusable_call")
    for call in (e for e in events if isinstance(e, ToolCallEvent)):
        assert call.name == "current_time"  # whatever it wrote, only offered tools come out
    visible = "".join(e.text for e in events if isinstance(e, ChunkEvent))
    assert "```tool" not in visible
