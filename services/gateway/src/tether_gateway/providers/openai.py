"""`openai`: the Chat Completions API, streamed — OpenAI itself and every server that speaks
it (vLLM, llama.cpp server, LM Studio, LiteLLM, Ollama's `/v1`).

Native tools go out as `tools`; streamed `tool_calls` deltas are assembled by index;
`reasoning_content` (or `reasoning`) deltas become `thinking`; usage comes from the final
chunk asked for with `stream_options.include_usage`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from functools import cached_property
from typing import Any

from pydantic import SecretStr

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import (
    ChatMessage,
    GenerateRequest,
    ModelEvent,
    OfferedToolSpec,
)
from tether_gateway.providers.bodies import MessageTexts, spliced
from tether_gateway.providers.hosted import HostedProvider, ResponseSchema
from tether_gateway.providers.http import (
    UpstreamError,
    disconnected,
    load_object,
    sse_events,
)
from tether_gateway.providers.turn import PendingCall, Turn
from tether_gateway.settings import GatewaySettings

DONE_SENTINEL = "[DONE]"


class OpenAIProvider(HostedProvider):
    name = "openai"

    def endpoint(self) -> str:
        return self.settings.openai_base_url.rstrip("/") + "/chat/completions"

    def api_key(self) -> SecretStr | None:
        return self.settings.openai_api_key

    def missing(self) -> str | None:
        return self.settings.openai_missing()

    def default_model(self) -> str | None:
        return self.settings.openai_model

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if self.settings.openai_api_key is not None:
            headers["authorization"] = f"Bearer {self.settings.openai_api_key.get_secret_value()}"
        return headers

    @cached_property
    def message_texts(self) -> MessageTexts:
        """Each history message's JSON, encoded once per kept message (`bodies`)."""
        return MessageTexts(chat_message)

    async def _attempt(
        self, request: GenerateRequest, model: str, response_schema: ResponseSchema
    ) -> AsyncGenerator[ModelEvent, None]:
        turn = Turn(request, self.price(model))
        reader = _ChunkReader(turn)
        fields = chat_fields(request, model, self.settings, response_schema)
        if (temperature := self.profiles.get(self.name, model).temperature) is not None:
            fields["temperature"] = temperature
        body = spliced(fields, self.message_texts.texts(request.messages))
        async with self.upstream.post_stream(self.url, body, self._headers()) as response:
            async for sse in sse_events(response):
                if sse.data.strip() == DONE_SENTINEL:
                    break
                for event in reader.feed(load_object(self.name, sse.data)):
                    yield event
            else:
                raise disconnected(self.name, f"no {DONE_SENTINEL} before the end of the stream")
        for event in reader.close():
            yield event


def chat_body(
    request: GenerateRequest,
    model: str,
    settings: GatewaySettings,
    response_schema: ResponseSchema = None,
) -> dict[str, Any]:
    """The request body, field for field as the Chat Completions reference documents it.

    A `response_schema` goes as `response_format: {"type": "json_object", "schema": …}`,
    the form both llama.cpp servers (C++ `llama-server` and `llama-cpp-python`) turn into
    a grammar; OpenAI's own `json_schema` form is refused by `llama-cpp-python`."""
    messages = [chat_message(m) for m in request.messages]
    return {"messages": messages, **chat_fields(request, model, settings, response_schema)}


def chat_fields(
    request: GenerateRequest,
    model: str,
    settings: GatewaySettings,
    response_schema: ResponseSchema = None,
) -> dict[str, Any]:
    """The body but its `messages` (`chat_body`)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [function_tool(tool) for tool in request.tools]
        body["tool_choice"] = request.tool_choice
    reasoning = model in settings.openai_reasoning_models
    if request.max_output_tokens is not None:
        # Reasoning models refuse the older `max_tokens`; many local servers know only it.
        body["max_completion_tokens" if reasoning else "max_tokens"] = request.max_output_tokens
    if reasoning and request.effort == "low":
        body["reasoning_effort"] = "low"
    if response_schema is not None:
        body["response_format"] = {"type": "json_object", "schema": dict(response_schema)}
    return body


def function_tool(tool: OfferedToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def chat_message(message: ChatMessage) -> dict[str, Any]:
    """One history message: assistant calls carry JSON-string arguments, results their id."""
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or message.name or "",
            "content": message.content,
        }
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


class _ChunkReader:
    """Turns `chat.completion.chunk` objects into events, assembling calls by index."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.calls: dict[int, PendingCall] = {}
        self.finish_reason: str | None = None

    def feed(self, chunk: dict[str, Any]) -> list[ModelEvent]:
        if chunk.get("error"):
            raise _stream_error(chunk["error"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.turn.input_tokens = _count(usage.get("prompt_tokens"))
            self.turn.output_tokens = _count(usage.get("completion_tokens"))
        events: list[ModelEvent] = []
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events.extend(self._choice(choice))
        return events

    def _choice(self, choice: dict[str, Any]) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(self.turn.thinking(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(self.turn.chunk(content))
        for piece in delta.get("tool_calls") or []:
            self._merge(piece)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        return events

    def _merge(self, piece: dict[str, Any]) -> None:
        """Fold one `tool_calls` delta into the call at its index: the first delta brings
        id and name, later ones bring pieces of the JSON arguments."""
        index = piece.get("index")
        if not isinstance(index, int):  # some servers leave it out: a new id is a new call
            index = len(self.calls) if piece.get("id") or not self.calls else max(self.calls)
        call = self.calls.setdefault(index, PendingCall(id=None, name="", arguments=""))
        function = piece.get("function") or {}
        call.id = call.id or piece.get("id")
        call.name = call.name or function.get("name") or ""
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send the object, not its text
            call.arguments = arguments
        elif isinstance(arguments, str) and isinstance(call.arguments, str):
            call.arguments += arguments

    def close(self) -> list[ModelEvent]:
        self.turn.calls = [self.calls[index] for index in sorted(self.calls)]
        return self.turn.close(self.finish_reason)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


def _stream_error(error: Any) -> UpstreamError:
    """An error object sent inside a 200 stream (OpenAI, vLLM and LiteLLM do this)."""
    detail = error.get("message") if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    overloaded = (isinstance(code, int) and code >= 500) or code in ("server_error", "overloaded")
    return UpstreamError(
        f"openai stream reported an error: {str(detail)[:300]}",
        code=ErrorCode.PROVIDER_UNAVAILABLE if overloaded else "provider_error",
        retryable=overloaded,
        retry_here=overloaded,
    )
