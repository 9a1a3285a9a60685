"""What one generation produced so far (text size, native calls being assembled, reported
usage), and the closing events every adapter ends with: calls, usage with cost, done."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tether_common.messages.gateway import (
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEvent,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.profiles import ModelPrice
from tether_gateway.providers.base import estimate_text_tokens, estimate_tokens, new_call_id

UNUSABLE_CALL = "unusable_call"


@dataclass(slots=True)
class PendingCall:
    """A native tool call as streamed: arguments are JSON text, or already an object."""

    id: str | None
    name: str
    arguments: str | dict[str, Any]


def decode_arguments(arguments: str | dict[str, Any]) -> dict[str, Any] | None:
    """A call's arguments as an object; empty text means none; None when unusable."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def cost_of(price: ModelPrice | None, input_tokens: int, output_tokens: int) -> float:
    if price is None:
        return 0.0
    spent = input_tokens * price.input_per_million + output_tokens * price.output_per_million
    return spent / 1_000_000


class Turn:
    """One generation's bookkeeping; the adapter feeds it and asks it for the last events."""

    def __init__(self, request: GenerateRequest, price: ModelPrice | None) -> None:
        self.request = request
        self.price = price
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.calls: list[PendingCall] = []
        self._output_chars = 0

    def chunk(self, text: str) -> ChunkEvent:
        self._output_chars += len(text)
        return ChunkEvent(text=text)

    def thinking(self, text: str) -> ThinkingEvent:
        self._output_chars += len(text)
        return ThinkingEvent(text=text)

    def usage(self) -> UsageEvent:
        """Usage as reported; whatever the provider left out is estimated and marked so."""
        estimated = self.input_tokens is None or self.output_tokens is None
        input_tokens = self.input_tokens
        if input_tokens is None:
            input_tokens = estimate_tokens(self.request.messages) + self._tools_estimate()
        output_tokens = self.output_tokens
        if output_tokens is None:
            output_tokens = int(self._output_chars / 3.5) + self._calls_estimate()
        return UsageEvent(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost_of(self.price, input_tokens, output_tokens),
            estimated=estimated,
        )

    def close(self, finish_reason: str | None) -> list[ModelEvent]:
        """The tool calls, usage and `done`; any unreadable call makes the whole turn an
        `unusable_call`, so the brain sends its corrective message instead of half a plan."""
        calls: list[ModelEvent] = []
        for pending in self.calls:
            arguments = decode_arguments(pending.arguments)
            if arguments is None or not pending.name:
                return [self.usage(), DoneEvent(finish_reason=UNUSABLE_CALL)]
            calls.append(
                ToolCallEvent(
                    id=pending.id or new_call_id(), name=pending.name, arguments=arguments
                )
            )
        reason = "tool_calls" if calls else (finish_reason or "stop")
        return [*calls, self.usage(), DoneEvent(finish_reason=reason)]

    def _tools_estimate(self) -> int:
        if not self.request.tools:
            return 0
        return estimate_text_tokens(json.dumps([t.model_dump() for t in self.request.tools]))

    def _calls_estimate(self) -> int:
        return sum(
            estimate_text_tokens(call.name + json.dumps(call.arguments)) for call in self.calls
        )
