"""A step's model request as it goes on the bus. The history it carries is most of it and
grows every step, but each message was already turned into JSON once, when it was added
to the run (`RunState.message_json`, the journal's text of it): the request's JSON is
spliced from those texts, so a step costs the brain the same at step 500 as at step 5.
The bytes parse to exactly what `model_dump_json` would give.

The system prompt and the history are the request's stable part: the gateway is asked
to keep them (`keep`), and the next step sends only what follows (`clients.histories`)."""

from __future__ import annotations

import operator
from typing import Any

from pydantic import PrivateAttr

from tether_brain.state.run import RunState
from tether_common.messages.gateway import ChatMessage, GenerateRequest


class CarriedRequest(GenerateRequest):
    """A `GenerateRequest` that knows the JSON of its messages. Only the plain dump (what
    the bus sends) is spliced; if `messages` was replaced since (`model_copy(update=…)`),
    it is dumped afresh."""

    _texts: list[str] = PrivateAttr(default_factory=list)
    _for: list[ChatMessage] | None = PrivateAttr(default=None)

    def model_dump_json(self, **kwargs: Any) -> str:
        if (kwargs and kwargs != {"exclude_none": False}) or self.messages is not self._for:
            return super().model_dump_json(**kwargs)
        head = super().model_dump_json(exclude={"messages"})
        return f'{head[:-1]},"messages":[{",".join(self._texts)}]}}'

    def message_texts(self) -> list[str]:
        return self._texts if self.messages is self._for else super().message_texts()


def carried(request: GenerateRequest, state: RunState) -> GenerateRequest:
    """`request` as a `CarriedRequest` whose run history (when it carries it unchanged
    after its system prompt: the same message objects) is the texts the run keeps."""
    messages, history = request.messages, state.messages
    n = len(history)
    inner = messages[1 : n + 1]
    if not n or len(state.message_json) != n or len(inner) != n:
        return request
    if not all(map(operator.is_, inner, history)):
        return request
    # Keep the system prompt and the history: what the next step's request begins with.
    fields = dict(request) | {"keep": n + 1}
    wire = CarriedRequest.model_construct(request.model_fields_set | {"keep"}, **fields)
    wire._texts = [
        messages[0].model_dump_json(),
        *state.message_json,
        *(m.model_dump_json() for m in messages[n + 1 :]),
    ]
    wire._for = wire.messages
    return wire
