"""A provider request body as JSON bytes, its history spliced from each message's JSON in
the adapter's wire format, encoded once per message object: a kept history
(`tether_gateway.histories`) hands the adapter the same message objects step after step,
so a long run's step encodes only its new messages, not its whole history again.

OpenAI's Chat Completions and Ollama's `/api/chat` map each message on its own;
Anthropic's Messages API merges neighbours into one turn, so its adapter remembers each
message's content blocks and joins them (`anthropic.spliced_turns`). The text protocol
rewrites the history each step (new message objects): it gains nothing here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tether_common.messages.gateway import ChatMessage
from tether_gateway.providers.http import JSON_ENCODER

# Characters of JSON remembered before all is forgotten (the next steps encode afresh).
MAX_CHARS = 32 * 2**20

Known = tuple["weakref.ref[ChatMessage]", str]


class MessageTexts:
    """Each message's JSON as `render` maps it, remembered while the message object lives
    (held weakly: a message the gateway no longer keeps is forgotten with it); all of it
    forgotten at once past `max_chars`."""

    def __init__(self, render: Callable[[ChatMessage], Any], max_chars: int = MAX_CHARS) -> None:
        self.render = render
        self.max_chars = max_chars
        self.chars = 0
        self._texts: dict[int, Known] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def texts(self, messages: Sequence[ChatMessage]) -> list[str]:
        out: list[str] = []
        for message in messages:
            known = self._texts.get(id(message))
            if known is None or known[0]() is not message:
                known = self._remember(message)
            out.append(known[1])
        return out

    def _remember(self, message: ChatMessage) -> Known:
        text = JSON_ENCODER.encode(self.render(message))
        if self.chars + len(text) > self.max_chars:
            self._texts.clear()
            self.chars = 0
        key = id(message)
        known: Known = (weakref.ref(message, lambda ref: self._forget(key, ref)), text)
        self._forget(key, None)
        self._texts[key] = known
        self.chars += len(text)
        return known

    def _forget(self, key: int, ref: weakref.ref[ChatMessage] | None) -> None:
        """The entry at `key` (only if it is still `ref`'s, when a message died)."""
        known = self._texts.get(key)
        if known is not None and (ref is None or known[0] is ref):
            del self._texts[key]
            self.chars -= len(known[1])


def spliced(fields: Mapping[str, Any], messages: list[str]) -> bytes:
    """The body: `messages` (each message's JSON) and `fields` (the rest), as JSON."""
    rest = JSON_ENCODER.encode(dict(fields))
    head = '{"messages":[' + ",".join(messages) + "]"
    return (head + ("}" if rest == "{}" else "," + rest[1:])).encode()
