"""Model generation: the brain's request and the normalized event stream the gateway answers.

The stream is `chunk`, `thinking`, `tool_call`, `usage`, then one terminal `done` or
`error`; each message on the wire is a `ModelEventMessage` wrapping one event.

A request may carry its history as a delta: `prefix_digest` names messages the gateway
was asked to keep before (`keep`), and `messages` are only what follows them. The digest
is `history_digest`: a sha256 chain over each message's canonical JSON (its
`model_dump_json()`), so it names the exact bytes of the exact messages, in order. A
gateway that does not hold the prefix (another replica, a restart, an eviction) refuses
with `prefix_unknown` and the sender sends the whole history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tether_common.messages.base import WireModel


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallRecord(_Body):
    """A tool call as the assistant made it, kept in history in canonical form."""

    id: str
    name: str
    arguments: dict[str, Any]
    # The gateway's repairs of this call (`ToolCallEvent.repairs`), for the step's record;
    # excluded from every dump, so histories, digests and the wire stay as they were.
    repairs: list[str] = Field(default_factory=list, exclude=True)


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[CallRecord] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None


class OfferedToolSpec(_Body):
    name: str
    description: str
    parameters: dict[str, Any]


class GenerateRequest(WireModel):
    run_id: str
    provider: str
    model: str | None = None
    messages: list[ChatMessage]
    tools: list[OfferedToolSpec] = Field(default_factory=list)
    effort: Literal["low", "normal"] = "normal"
    max_output_tokens: int | None = Field(default=None, ge=1)
    # `required`: the reply must be a call to one of `tools` where the provider can hold
    # the model to that (a reply grammar without its answer branch, a native API's own
    # `required`); elsewhere it is `auto`, and the model may answer.
    tool_choice: Literal["auto", "required"] = "auto"
    # The history as a delta (see the module): `messages` follow the kept prefix this
    # names. None: `messages` are the whole history. (Left out of the JSON when None, so
    # a gateway from before deltas still reads a plain request.)
    prefix_digest: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", exclude_if=lambda v: v is None
    )
    # Keep the first `keep` messages of the whole history (prefix and `messages`) under
    # their digest, for the next request to name; None: keep nothing.
    keep: int | None = Field(default=None, ge=1, exclude_if=lambda v: v is None)

    def message_texts(self) -> list[str]:
        """Each message's canonical JSON: what `history_digest` is over."""
        return [message.model_dump_json() for message in self.messages]


# The digest of the empty history; each message extends it (`history_digest`).
HISTORY_ROOT = hashlib.sha256(b"tether.history.v1").digest()


def history_digest(after: bytes, texts: Iterable[str]) -> bytes:
    """The digest of a history: `after` (a prefix's digest, or `HISTORY_ROOT`) extended by
    each message's canonical JSON in order. Every link hashes a 32-byte digest and one
    message, so two histories share a digest only if they are the same messages, byte
    for byte (or sha256 collides); and a long history is extended, never re-hashed."""
    digest = after
    for text in texts:
        digest = hashlib.sha256(digest + text.encode()).digest()
    return digest


class ChunkEvent(_Body):
    kind: Literal["chunk"] = "chunk"
    text: str


class ThinkingEvent(_Body):
    kind: Literal["thinking"] = "thinking"
    text: str


class ToolCallEvent(_Body):
    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any]
    # What the gateway changed to make the call usable (a near tool name, a key synonym,
    # a name inferred from the keys), in words, for the step's record; empty: as written.
    repairs: list[str] = Field(default_factory=list, max_length=50)


class UsageEvent(_Body):
    kind: Literal["usage"] = "usage"
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost: float = Field(default=0.0, ge=0)
    estimated: bool = False


class DoneEvent(_Body):
    kind: Literal["done"] = "done"
    finish_reason: str = "stop"


class ErrorEvent(_Body):
    kind: Literal["error"] = "error"
    code: str
    retryable: bool = False
    message: str


ModelEvent = Annotated[
    ChunkEvent | ThinkingEvent | ToolCallEvent | UsageEvent | DoneEvent | ErrorEvent,
    Field(discriminator="kind"),
]
MODEL_EVENT: TypeAdapter[ModelEvent] = TypeAdapter(ModelEvent)


class ModelEventMessage(WireModel):
    event: ModelEvent

    @property
    def terminal(self) -> bool:
        return self.event.kind in ("done", "error")
