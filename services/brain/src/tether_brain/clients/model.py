"""Asks the gateway for one model turn and collects its normalized event stream."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.gateway import (
    CallRecord,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.runs import Usage


@dataclass(slots=True)
class ModelTurn:
    text: str = ""
    thinking: str = ""
    calls: list[CallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    error: ErrorEvent | None = None


class ModelClient:
    def __init__(self, bus: Bus, *, timeout_s: float) -> None:
        self.bus = bus
        self.timeout_s = timeout_s

    async def generate(self, request: GenerateRequest) -> ModelTurn:
        """One turn; a failure of the bus or the provider is an `error` in the turn. A
        gateway that went silent or away is asked once more (a model call has no effect
        outside, so the turn is simply made again)."""
        turn = await self._once(request)
        if turn.error is not None and turn.error.code in ("timeout", "no_responders"):
            turn = await self._once(request)
        return turn

    async def _once(self, request: GenerateRequest) -> ModelTurn:
        turn = ModelTurn()
        route = self.bus.subjects.generate(request.provider)
        try:
            async for message in self.bus.stream(
                route, request, is_terminal=lambda m: m.terminal, timeout=self.timeout_s
            ):
                collect(turn, message.event)
        except TetherError as exc:
            turn.error = ErrorEvent(code=exc.code, retryable=exc.retryable, message=exc.message)
        return turn


def collect(
    turn: ModelTurn,
    event: ChunkEvent | ThinkingEvent | ToolCallEvent | UsageEvent | DoneEvent | ErrorEvent,
) -> None:
    match event:
        case ChunkEvent():
            if not turn.calls:  # text after a call is an invented result: dropped
                turn.text += event.text
        case ThinkingEvent():
            turn.thinking += event.text
        case ToolCallEvent():
            turn.calls.append(
                CallRecord(
                    id=event.id, name=event.name, arguments=event.arguments, repairs=event.repairs
                )
            )
        case UsageEvent():
            turn.usage = Usage(
                input_tokens=turn.usage.input_tokens + event.input_tokens,
                output_tokens=turn.usage.output_tokens + event.output_tokens,
                cost=turn.usage.cost + event.cost,
                estimated=turn.usage.estimated or event.estimated,
            )
        case DoneEvent():
            turn.finish_reason = event.finish_reason
        case ErrorEvent():
            turn.error = event
