"""The official `openai` and `anthropic` SDKs and our adapters, asked for the same streamed
call with a tool and a tool result, send bodies of the same shape: the same top-level
keys, the same tool schema layout, the same message layout for calls and results."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import (
    AssistantMessageParam,
    MessageParam,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)
from pydantic import SecretStr

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
)
from tether_gateway.providers import AnthropicProvider, OpenAIProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Received, Reply, collect, sse

KEY = "sk-shape-test-0123456789"
MODEL = "shape-model"
MAX_TOKENS = 256
SYSTEM = "Be brief."
QUESTION = "Time in Tokyo?"
CALL_ID = "call_1"
ARGUMENTS: dict[str, object] = {"timezone": "Asia/Tokyo"}
RESULT = "2026-01-01T09:00:00+09:00"
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOL = OfferedToolSpec(name="current_time", description="The time now.", parameters=PARAMETERS)


def shape(value: Any) -> Any:
    """Keys and JSON types, not values: what must agree between two senders."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def request() -> GenerateRequest:
    return GenerateRequest(
        run_id="run-shape",
        provider="openai",
        model=MODEL,
        max_output_tokens=MAX_TOKENS,
        tools=[TOOL],
        messages=[
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=QUESTION),
            ChatMessage(
                role="assistant",
                tool_calls=[CallRecord(id=CALL_ID, name=TOOL.name, arguments=ARGUMENTS)],
            ),
            ChatMessage(role="tool", tool_call_id=CALL_ID, name=TOOL.name, content=RESULT),
        ],
    )


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def settings(upstream: FakeUpstream) -> GatewaySettings:
    return GatewaySettings(
        openai_base_url=f"{upstream.url}/v1",
        openai_api_key=SecretStr(KEY),
        anthropic_base_url=upstream.url,
        anthropic_api_key=SecretStr(KEY),
        anthropic_max_tokens=MAX_TOKENS,
        retry_attempts=0,
        connect_timeout_s=5.0,
        inactivity_timeout_s=5.0,
    )


# --- openai ---------------------------------------------------------------------------


def openai_stream() -> Reply:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": "9 am."}, "finish_reason": "stop"}],
    }
    return Reply(pieces=[sse(chunk), sse("[DONE]")])


async def openai_sdk_call(upstream: FakeUpstream) -> Received:
    upstream.queue(openai_stream())
    sdk = openai.AsyncOpenAI(base_url=f"{upstream.url}/v1", api_key=KEY, max_retries=0)
    async with sdk:
        stream = await sdk.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": QUESTION},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": CALL_ID,
                            "type": "function",
                            "function": {
                                "name": TOOL.name,
                                "arguments": '{"timezone": "Asia/Tokyo"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": CALL_ID, "content": RESULT},
            ],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": TOOL.name,
                        "description": TOOL.description,
                        "parameters": PARAMETERS,
                    },
                }
            ],
            tool_choice="auto",
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for _ in stream:
            pass
    return upstream.received[-1]


async def openai_adapter_call(upstream: FakeUpstream, http: httpx.AsyncClient) -> Received:
    upstream.queue(openai_stream())
    events = await collect(OpenAIProvider(settings(upstream), http).generate(request()))
    assert events[-1].kind == "done"
    return upstream.received[-1]


async def test_openai_body_has_the_sdks_shape(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    sdk = (await openai_sdk_call(upstream)).json()
    ours = (await openai_adapter_call(upstream, http)).json()
    assert sorted(ours) == sorted(sdk)
    assert ours["tools"] == sdk["tools"]
    assert shape(ours["messages"]) == shape(sdk["messages"])
    assert ours["messages"][2]["tool_calls"][0]["function"]["name"] == TOOL.name
    assert ours["messages"][3] == sdk["messages"][3]
    assert ours["stream_options"] == sdk["stream_options"]


async def test_openai_request_line_and_headers_match_the_sdk(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    sdk = await openai_sdk_call(upstream)
    ours = await openai_adapter_call(upstream, http)
    assert (ours.method, ours.path) == (sdk.method, sdk.path) == ("POST", "/v1/chat/completions")
    assert ours.headers["authorization"] == sdk.headers["authorization"] == f"Bearer {KEY}"
    assert ours.headers["content-type"] == sdk.headers["content-type"]


# --- anthropic ------------------------------------------------------------------------


def anthropic_stream() -> Reply:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    return Reply(
        pieces=[
            sse({"type": "message_start", "message": message}, "message_start"),
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 3},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]
    )


def anthropic_history() -> list[MessageParam]:
    """The question, the call and its result as SDK types (mypy picks each by its class)."""
    return [
        UserMessageParam(role="user", content=[TextBlockParam(type="text", text=QUESTION)]),
        AssistantMessageParam(
            role="assistant",
            content=[
                ToolUseBlockParam(type="tool_use", id=CALL_ID, name=TOOL.name, input=ARGUMENTS)
            ],
        ),
        UserMessageParam(
            role="user",
            content=[ToolResultBlockParam(type="tool_result", tool_use_id=CALL_ID, content=RESULT)],
        ),
    ]


async def anthropic_sdk_call(upstream: FakeUpstream) -> Received:
    upstream.queue(anthropic_stream())
    sdk = anthropic.AsyncAnthropic(base_url=upstream.url, api_key=KEY, max_retries=0)
    async with sdk:
        stream = await sdk.messages.create(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            system=SYSTEM,
            messages=anthropic_history(),
            tools=[
                {"name": TOOL.name, "description": TOOL.description, "input_schema": PARAMETERS}
            ],
            stream=True,
        )
        async for _ in stream:
            pass
    return upstream.received[-1]


async def anthropic_adapter_call(upstream: FakeUpstream, http: httpx.AsyncClient) -> Received:
    upstream.queue(anthropic_stream())
    adapter = AnthropicProvider(settings(upstream), http)
    events = await collect(
        adapter.generate(request().model_copy(update={"max_output_tokens": None}))
    )
    assert events[-1].kind == "done"
    return upstream.received[-1]


async def test_anthropic_body_has_the_sdks_shape(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    sdk = (await anthropic_sdk_call(upstream)).json()
    ours = (await anthropic_adapter_call(upstream, http)).json()
    assert sorted(ours) == sorted(sdk)
    assert ours["system"] == sdk["system"]
    assert ours["tools"] == sdk["tools"]
    assert shape(ours["messages"]) == shape(sdk["messages"])
    assert ours["messages"] == sdk["messages"]


def anthropic_key(headers: dict[str, str]) -> str | None:
    """The API key, from `x-api-key` (the documented header, which we send) or a bearer
    `authorization` (which SDK 2.x sends for an API key); the API takes either."""
    bearer = headers.get("authorization", "").removeprefix("Bearer ")
    return headers.get("x-api-key") or bearer or None


async def test_anthropic_request_line_and_headers_match_the_sdk(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    sdk = await anthropic_sdk_call(upstream)
    ours = await anthropic_adapter_call(upstream, http)
    assert (ours.method, ours.path) == (sdk.method, sdk.path) == ("POST", "/v1/messages")
    assert anthropic_key(ours.headers) == anthropic_key(sdk.headers) == KEY
    assert ours.headers["content-type"] == sdk.headers["content-type"]
    # The version is a setting (`TETHER_GATEWAY_ANTHROPIC_VERSION`); both send one.
    for headers in (ours.headers, sdk.headers):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", headers["anthropic-version"])
