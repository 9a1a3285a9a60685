"""The `local` provider: the openai adapter on the local server's URL, one model, no key,
an output cap, and the text protocol unless switched off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tether_common.messages.gateway import (
    ChatMessage,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    OfferedToolSpec,
    ToolCallEvent,
    UsageEvent,
)
from tether_gateway.providers.local import LocalProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Reply, collect, sse

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


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-local",
        "provider": "local",
        "messages": [ChatMessage(role="user", content="Time in Tokyo?")],
        "tools": [CLOCK],
    }
    return GenerateRequest(**{**base, **changes})


def stream(text: str) -> Reply:
    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}
    return Reply(pieces=[sse(delta), sse(usage), sse("[DONE]")])


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def settings(upstream: FakeUpstream, **changes: Any) -> GatewaySettings:
    base: dict[str, Any] = {
        "local_base_url": f"{upstream.url}/v1",
        "openai_api_key": SecretStr("sk-must-not-leave-0123"),
        "retry_attempts": 0,
        "connect_timeout_s": 2.0,
        "inactivity_timeout_s": 2.0,
    }
    return GatewaySettings(**{**base, **changes})


async def test_a_text_call_becomes_a_tool_call(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("```tool\n{'name': 'current_time', 'args': {'timezone': 'Asia/Tokyo'}}"))
    events = await collect(LocalProvider(settings(upstream), http).generate(request()))
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert (call.name, call.arguments) == ("current_time", {"timezone": "Asia/Tokyo"})
    usage = next(e for e in events if isinstance(e, UsageEvent))
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (40, 9, False)
    assert events[-1] == DoneEvent(finish_reason="tool_calls")


async def test_the_request_goes_to_the_local_server_for_its_one_model(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    provider = LocalProvider(settings(upstream, local_model="smol"), http)
    await collect(provider.generate(request(model="named-by-the-run")))
    sent = upstream.received[0]
    body = sent.json()
    assert sent.path == "/v1/chat/completions"
    assert "authorization" not in sent.headers
    assert body["model"] == "smol"
    assert body["max_tokens"] == 512
    assert "tools" not in body
    # The local default profile: text protocol under a grammar (one JSON object a reply).
    assert "current_time" in body["messages"][0]["content"]
    assert body["response_format"]["type"] == "json_object"


async def test_a_run_limit_beats_the_default_cap(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    await collect(LocalProvider(settings(upstream), http).generate(request(max_output_tokens=64)))
    assert upstream.received[0].json()["max_tokens"] == 64


async def test_native_tools_when_the_text_protocol_is_off(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    provider = LocalProvider(settings(upstream, local_text_protocol=False), http)
    await collect(provider.generate(request()))
    body = upstream.received[0].json()
    assert body["tools"][0]["function"]["name"] == "current_time"


async def test_errors_name_the_local_provider(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(Reply(status=400, pieces=[b'{"error": {"message": "context too long"}}']))
    events = await collect(LocalProvider(settings(upstream), http).generate(request()))
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert error.code == "provider_bad_request"
    assert error.message.startswith("local answered HTTP 400")
    assert "context too long" in error.message
