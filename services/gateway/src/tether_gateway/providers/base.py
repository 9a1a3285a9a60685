"""The edge every provider adapter implements, the shared token estimates and call ids."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from tether_common.messages.gateway import ChatMessage, GenerateRequest, ModelEvent

CHARS_PER_TOKEN = 3.5
TOKENS_PER_MESSAGE = 6


class Provider(Protocol):
    """Turns one generation request into normalized events; ends with done or error."""

    @property
    def name(self) -> str: ...

    # An async generator, not just an iterator: the consumer must be able to `aclose()`
    # it, which closes the upstream HTTP stream at once.
    def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]: ...


def estimate_tokens(messages: Sequence[ChatMessage]) -> int:
    """The estimate used where a provider reports no usage (marked `estimated`)."""
    chars = sum(len(m.content) + sum(len(str(c.arguments)) for c in m.tool_calls) for m in messages)
    return int(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)


def estimate_text_tokens(text: str) -> int:
    """The estimate of a generated text's tokens, where the provider reports none."""
    return int(len(text) / CHARS_PER_TOKEN) + (1 if text else 0)


def new_call_id() -> str:
    """An id for a tool call whose provider gave none (text protocol, some local servers)."""
    return f"call_{uuid.uuid4().hex[:24]}"
