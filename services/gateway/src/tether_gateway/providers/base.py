"""The edge every provider adapter implements, and the shared token estimate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from tether_common.messages.gateway import ChatMessage, GenerateRequest, ModelEvent

CHARS_PER_TOKEN = 3.5
TOKENS_PER_MESSAGE = 6


class Provider(Protocol):
    """Turns one generation request into normalized events; ends with done or error."""

    @property
    def name(self) -> str: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[ModelEvent]: ...


def estimate_tokens(messages: Sequence[ChatMessage]) -> int:
    """The estimate used where a provider reports no usage (marked `estimated`)."""
    chars = sum(len(m.content) + sum(len(str(c.arguments)) for c in m.tool_calls) for m in messages)
    return int(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)
