"""The histories this gateway replica keeps for model requests that send theirs as a delta
(`GenerateRequest.prefix_digest`, `keep`): parsed messages by the digest of their
canonical JSON, least recently used out first, bounded in (estimated) bytes.

A hit gives only messages, and byte-identical ones: the digest is over exactly their
canonical bytes (`history_digest`), computed here from what this replica parsed, never
taken from a sender. Everything else a generation uses (provider, model, tools, the
provider's key, the model's profile) comes from the request in hand, never from here,
so one run or tenant can save another a resend of the same messages, never change what
its request means. A request naming a prefix not held here is refused with
`prefix_unknown`, and its sender sends the whole history.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from tether_common.errors import ErrorCode, MessageError, NotFoundError
from tether_common.messages.gateway import (
    HISTORY_ROOT,
    ChatMessage,
    GenerateRequest,
    history_digest,
)

log = logging.getLogger(__name__)

# What a parsed message costs beyond its JSON's characters (the model, its dict and
# strings' headers: about 1.25 KiB measured with tracemalloc), so a bound in bytes holds
# for histories of many short messages too.
MESSAGE_OVERHEAD = 1536


@dataclass(frozen=True, slots=True)
class Kept:
    """A history prefix: its digest, its messages, and what it is counted as."""

    digest: bytes
    messages: tuple[ChatMessage, ...]
    size: int


EMPTY = Kept(HISTORY_ROOT, (), 0)


class HistoryCache:
    """Kept prefixes by digest, at most `max_bytes` of them (estimated as their JSON
    plus `MESSAGE_OVERHEAD` a message); the least recently used go first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._kept: OrderedDict[bytes, Kept] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, digest: bytes) -> Kept | None:
        kept = self._kept.get(digest)
        if kept is not None:
            self._kept.move_to_end(digest)
        return kept

    def put(self, kept: Kept) -> None:
        """Keep `kept` (replacing one of the same digest: the same messages); one larger
        than the whole bound is not kept. Evicts the least recently used to fit."""
        self.drop(kept.digest)
        if kept.size > self.max_bytes:
            return
        self._kept[kept.digest] = kept
        self.size += kept.size
        while self.size > self.max_bytes:
            _, evicted = self._kept.popitem(last=False)
            self.size -= evicted.size

    def drop(self, digest: bytes) -> None:
        if (gone := self._kept.pop(digest, None)) is not None:
            self.size -= gone.size


def expanded(cache: HistoryCache, request: GenerateRequest) -> GenerateRequest:
    """`request` with its whole history (its kept prefix and its `messages`), having kept
    what it says to keep. A prefix not held here raises `prefix_unknown`; a `keep` past
    the history's end, `invalid_message`."""
    if request.prefix_digest is None and request.keep is None:
        return request  # the whole history, nothing to keep: as it came
    prefix = EMPTY
    if request.prefix_digest is not None:
        found = cache.get(bytes.fromhex(request.prefix_digest))
        if found is None:
            raise NotFoundError(
                f"history prefix {request.prefix_digest[:12]}… is not held by this gateway "
                "replica (another replica, a restart or an eviction): send the whole history",
                code=ErrorCode.PREFIX_UNKNOWN,
            )
        prefix = found
    messages = (*prefix.messages, *request.messages)
    if request.keep is not None:
        if request.keep > len(messages):
            raise MessageError(
                f"keep {request.keep} is past the {len(messages)} messages of the history",
                code=ErrorCode.INVALID_MESSAGE,
            )
        keep(cache, prefix, messages[: request.keep])
    return request.model_copy(
        update={"messages": list(messages), "prefix_digest": None, "keep": None}
    )


def keep(cache: HistoryCache, prefix: Kept, messages: tuple[ChatMessage, ...]) -> None:
    """Keep `messages` under their digest, extending `prefix`'s where they extend it (only
    the new messages are encoded and hashed). The prefix they extend is dropped: its run
    names the longer one next, and a request that still names it is sent whole."""
    start = len(prefix.messages)
    if start > len(messages):  # `messages` begin with `prefix`'s (`expanded`)
        prefix, start = EMPTY, 0  # shorter than its prefix: hashed from the root
    texts = [message.model_dump_json() for message in messages[start:]]
    digest = history_digest(prefix.digest, texts)
    size = prefix.size + sum(len(text) + MESSAGE_OVERHEAD for text in texts)
    if prefix.messages and digest != prefix.digest:
        cache.drop(prefix.digest)
    cache.put(Kept(digest, messages, size))
