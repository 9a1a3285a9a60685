"""`ollama`: Ollama's native `/api/chat`, streamed as newline-delimited JSON.

Tools go out as `tools`; calls arrive whole in `message.tool_calls` (arguments as an
object); `message.thinking` becomes `thinking`; the final object (`done: true`) carries
`done_reason`, `prompt_eval_count` and `eval_count`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from functools import cached_property
from typing import Any

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import ChatMessage, GenerateRequest, ModelEvent
from tether_gateway.providers.bodies import MessageTexts, spliced
from tether_gateway.providers.hosted import HostedProvider, ResponseSchema
from tether_gateway.providers.http import UpstreamError, disconnected, json_lines
from tether_gateway.providers.openai import function_tool
from tether_gateway.providers.turn import PendingCall, Turn


class OllamaProvider(HostedProvider):
    name = "ollama"

    def endpoint(self) -> str:
        return self.settings.ollama_url.rstrip("/") + "/api/chat"

    def default_model(self) -> str | None:
        return self.settings.ollama_model

    @cached_property
    def message_texts(self) -> MessageTexts:
        """Each history message's JSON, encoded once per kept message (`bodies`)."""
        return MessageTexts(chat_message)

    async def _attempt(
        self, request: GenerateRequest, model: str, response_schema: ResponseSchema
    ) -> AsyncGenerator[ModelEvent, None]:
        reader = _LineReader(Turn(request, self.price(model)))
        body = spliced(chat_fields(request, model), self.message_texts.texts(request.messages))
        async with self.upstream.post_stream(self.url, body, {}) as response:
            async for line in json_lines(self.name, response):
                for event in reader.feed(line):
                    yield event
                if reader.done:
                    break
            else:
                raise disconnected(self.name, "no final object before the end of the stream")
        for event in reader.close():
            yield event


def chat_body(request: GenerateRequest, model: str) -> dict[str, Any]:
    """The request body as Ollama's API reference (`POST /api/chat`) documents it."""
    return {"messages": [chat_message(m) for m in request.messages], **chat_fields(request, model)}


def chat_fields(request: GenerateRequest, model: str) -> dict[str, Any]:
    """The body but its `messages` (`chat_body`)."""
    body: dict[str, Any] = {"model": model, "stream": True}
    if request.tools:
        body["tools"] = [function_tool(tool) for tool in request.tools]
    if request.max_output_tokens is not None:
        body["options"] = {"num_predict": request.max_output_tokens}
    return body


def chat_message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.role == "tool" and message.name:
        out["tool_name"] = message.name
    return out


class _LineReader:
    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.done = False
        self.done_reason: str | None = None

    def feed(self, line: dict[str, Any]) -> list[ModelEvent]:
        if line.get("error"):
            raise UpstreamError(
                f"ollama stream reported an error: {str(line['error'])[:300]}",
                code=ErrorCode.PROVIDER_ERROR,
                retryable=False,
            )
        events: list[ModelEvent] = []
        message = line.get("message") or {}
        if isinstance(message.get("thinking"), str) and message["thinking"]:
            events.append(self.turn.thinking(message["thinking"]))
        if isinstance(message.get("content"), str) and message["content"]:
            events.append(self.turn.chunk(message["content"]))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            self.turn.calls.append(
                PendingCall(
                    id=call.get("id"),
                    name=str(function.get("name") or ""),
                    arguments=arguments if isinstance(arguments, dict | str) else "",
                )
            )
        if line.get("done"):
            self._finish(line)
        return events

    def _finish(self, line: dict[str, Any]) -> None:
        self.done = True
        self.done_reason = line.get("done_reason")
        # Older Ollama versions leave `prompt_eval_count` out when the prompt was cached;
        # the turn then estimates it.
        if isinstance(line.get("prompt_eval_count"), int):
            self.turn.input_tokens = line["prompt_eval_count"]
        if isinstance(line.get("eval_count"), int):
            self.turn.output_tokens = line["eval_count"]

    def close(self) -> list[ModelEvent]:
        return self.turn.close(self.done_reason)
