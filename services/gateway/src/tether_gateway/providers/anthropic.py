"""`anthropic`: the Messages API, streamed.

System messages become the top-level `system` field; assistant calls are `tool_use`
blocks and tool results `tool_result` blocks in a user turn. The stream's
`content_block_delta`s carry `text_delta`, `thinking_delta` and `input_json_delta`
pieces; usage comes from `message_start` and `message_delta`; `message_stop` ends it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from functools import cached_property
from typing import Any

from pydantic import SecretStr

from tether_common.messages.gateway import (
    ChatMessage,
    GenerateRequest,
    ModelEvent,
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

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}

# Error types of the Messages API (in a body or an `error` stream event) → (code, retryable).
ERROR_TYPES: dict[str, tuple[str, bool]] = {
    "overloaded_error": ("provider_unavailable", True),
    "api_error": ("provider_unavailable", True),
    "rate_limit_error": ("provider_rate_limited", True),
    "authentication_error": ("provider_auth", False),
    "permission_error": ("provider_auth", False),
    "invalid_request_error": ("provider_bad_request", False),
    "not_found_error": ("provider_bad_request", False),
    "request_too_large": ("provider_bad_request", False),
}


class AnthropicProvider(HostedProvider):
    name = "anthropic"

    def endpoint(self) -> str:
        return self.settings.anthropic_base_url.rstrip("/") + "/v1/messages"

    def api_key(self) -> SecretStr | None:
        return self.settings.anthropic_api_key

    def missing(self) -> str | None:
        return self.settings.anthropic_missing()

    def default_model(self) -> str | None:
        return self.settings.anthropic_model

    def _headers(self) -> dict[str, str]:
        key = self.settings.anthropic_api_key
        return {
            "x-api-key": key.get_secret_value() if key is not None else "",
            "anthropic-version": self.settings.anthropic_version,
            "accept": "text/event-stream",
        }

    @cached_property
    def message_blocks(self) -> MessageTexts:
        """Each history message's content blocks as JSON, encoded once per kept message
        (`bodies`); `spliced_turns` merges them into turns."""
        return MessageTexts(turn_blocks)

    async def _attempt(
        self, request: GenerateRequest, model: str, response_schema: ResponseSchema
    ) -> AsyncGenerator[ModelEvent, None]:
        reader = _EventReader(Turn(request, self.price(model)))
        fields = messages_fields(request, model, self.settings.anthropic_max_tokens)
        blocks = self.message_blocks.texts(request.messages)
        body = spliced(fields, spliced_turns(request.messages, blocks))
        async with self.upstream.post_stream(self.url, body, self._headers()) as response:
            async for sse in sse_events(response):
                for event in reader.feed(load_object(self.name, sse.data)):
                    yield event
                if reader.stopped:
                    break
            else:
                raise disconnected(self.name, "no message_stop before the end of the stream")
        for event in reader.close():
            yield event


def messages_body(request: GenerateRequest, model: str, max_tokens: int) -> dict[str, Any]:
    """The request body, field for field as the Messages API reference documents it."""
    return {"messages": turns(request.messages), **messages_fields(request, model, max_tokens)}


def messages_fields(request: GenerateRequest, model: str, max_tokens: int) -> dict[str, Any]:
    """The body but its `messages` (`messages_body`)."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_output_tokens or max_tokens,
        "stream": True,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    return body


def turns(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Our history as alternating user/assistant turns of content blocks; tool results
    ride in the next user turn, merged with any neighbour of the same role."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = content_blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def turn_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """What `message` adds to its turn: system messages go in `system`, not in turns."""
    return [] if message.role == "system" else content_blocks(message)


def spliced_turns(messages: Sequence[ChatMessage], blocks: Sequence[str]) -> list[str]:
    """`turns(messages)` as JSON texts, from each message's `turn_blocks` JSON."""
    out: list[str] = []
    role, parts = "", list[str]()
    for message, text in zip(messages, blocks, strict=True):
        if text == "[]":
            continue
        this = "assistant" if message.role == "assistant" else "user"
        if this != role and parts:
            out.append(_turn(role, parts))
            parts = []
        role = this
        parts.append(text[1:-1])
    if parts:
        out.append(_turn(role, parts))
    return out


def _turn(role: str, parts: list[str]) -> str:
    return '{"role":"' + role + '","content":[' + ",".join(parts) + "]}"


def content_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
            }
        ]
    # The API refuses empty text blocks, so an empty content adds none.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    if message.role == "assistant":
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            for call in message.tool_calls
        )
    return blocks


class _EventReader:
    """Turns Messages stream events into our events; unknown event types are skipped, as
    the API's versioning policy asks of clients."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.blocks: dict[int, PendingCall] = {}
        self.stop_reason: str | None = None
        self.stopped = False

    def feed(self, data: dict[str, Any]) -> list[ModelEvent]:
        kind = data.get("type")
        if kind == "content_block_delta":
            return self._delta(data.get("index"), data.get("delta") or {})
        if kind == "content_block_start":
            return self._start(data.get("index"), data.get("content_block") or {})
        if kind == "message_start":
            self._usage((data.get("message") or {}).get("usage"))
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise stream_error(data.get("error"))
        return []

    def _start(self, index: Any, block: dict[str, Any]) -> list[ModelEvent]:
        kind = block.get("type")
        if kind == "tool_use" and isinstance(index, int):
            # `input` is `{}` here and the JSON follows in pieces; keep a non-empty one.
            start = block.get("input")
            self.blocks[index] = PendingCall(
                id=block.get("id"), name=str(block.get("name") or ""), arguments=""
            )
            if isinstance(start, dict) and start:
                self.blocks[index].arguments = start
        elif kind == "text" and block.get("text"):
            return [self.turn.chunk(str(block["text"]))]
        elif kind == "thinking" and block.get("thinking"):
            return [self.turn.thinking(str(block["thinking"]))]
        return []

    def _delta(self, index: Any, delta: dict[str, Any]) -> list[ModelEvent]:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return [self.turn.chunk(str(delta["text"]))]
        if kind == "thinking_delta" and delta.get("thinking"):
            return [self.turn.thinking(str(delta["thinking"]))]
        if kind == "input_json_delta" and isinstance(index, int) and index in self.blocks:
            call = self.blocks[index]
            if isinstance(call.arguments, str):
                call.arguments += str(delta.get("partial_json") or "")
        return []

    def _usage(self, usage: Any) -> None:
        """`message_start` has the input; `message_delta` the (cumulative) output and,
        in newer API versions, the input again. Cache reads and writes are input too."""
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("input_tokens"), int):
            self.turn.input_tokens = sum(
                usage.get(key) or 0
                for key in (
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                )
                if isinstance(usage.get(key) or 0, int)
            )
        if isinstance(usage.get("output_tokens"), int):
            self.turn.output_tokens = usage["output_tokens"]

    def close(self) -> list[ModelEvent]:
        self.turn.calls = [self.blocks[index] for index in sorted(self.blocks)]
        return self.turn.close(STOP_REASONS.get(self.stop_reason or "", self.stop_reason))


def stream_error(error: Any) -> UpstreamError:
    """An `error` event inside a 200 stream, e.g. `overloaded_error` under load."""
    kind = str(error.get("type")) if isinstance(error, dict) else "error"
    detail = error.get("message") if isinstance(error, dict) else error
    code, retryable = ERROR_TYPES.get(kind, ("provider_error", False))
    return UpstreamError(
        f"anthropic stream reported {kind}: {str(detail)[:300]}",
        code=code,
        retryable=retryable,
        retry_here=retryable,
    )
