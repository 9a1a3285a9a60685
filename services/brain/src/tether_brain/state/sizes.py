"""How much of the context window a message takes, as the brain estimates it: its
characters (text, and each call's name and arguments). One definition, used by the
context estimate and by the running total a run keeps of its history."""

from __future__ import annotations

from tether_common.messages.gateway import ChatMessage


def message_chars(message: ChatMessage) -> int:
    return len(message.content) + sum(
        len(str(c.arguments)) + len(c.name) for c in message.tool_calls
    )
