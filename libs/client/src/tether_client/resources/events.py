"""A run's event stream (`GET /v1/runs/{id}/events`, server-sent events): live, as the
wire carries it, or each event read as its kind's model. `Runs.wait` and `Threads.chat`
follow it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing

from httpx_sse import aconnect_sse
from pydantic import ValidationError

from tether_client.resources.core import ClientCore, raise_for_error
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.deltas import RunDelta
from tether_common.messages.events import TypedEvent, typed
from tether_common.messages.runs import RunEvent

__all__ = ["Events"]

log = logging.getLogger(__name__)


class Events(ClientCore):
    """Following a run's events."""

    async def live(
        self, run_id: str, *, after: int = 0, deltas: bool = True
    ) -> AsyncGenerator[RunEvent | RunDelta, None]:
        """The run's durable events after `after`, live, ending with `run.end`, and between
        them (with `deltas`) the model's text as it is written (`RunDelta`: not replayed,
        no `seq`; a reader that reconnects resumes after the last durable event)."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        path = f"/v1/runs/{run_id}/events"
        params = {"deltas": "true" if deltas else "false"}
        async with aconnect_sse(
            self._http, "GET", path, headers=headers, params=params, timeout=None
        ) as source:
            raise_for_error(source.response)
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                # Durable events are named by their kind (`event: run.start` ...) and carry
                # an id to resume after; live text is `event: delta`, with no id.
                if sse.event == "delta":
                    yield RunDelta.model_validate_json(sse.data)
                    continue
                event = RunEvent.model_validate(json.loads(sse.data))
                yield event
                if event.kind == "run.end":
                    return

    async def events(self, run_id: str, *, after: int = 0) -> AsyncGenerator[RunEvent, None]:
        """The run's events after `after` as the wire carries them (`data` a JSON object),
        live, ending with `run.end`; `typed_events` reads each as its kind's model. For a
        reader that must show even what it cannot read (the CLI's renderer). No live
        text: `live` is for a reader that shows it (`tether chat`)."""
        async with aclosing(self.live(run_id, after=after, deltas=False)) as items:
            async for item in items:
                if isinstance(item, RunEvent):
                    yield item

    async def typed_events(
        self, run_id: str, *, after: int = 0
    ) -> AsyncGenerator[TypedEvent, None]:
        """The run's events after `after`, each as its kind's model, live, ending with
        `run.end`. An event whose data its kind cannot hold raises `MessageError` (its
        `seq` in the message): follow again with `after` set past it."""
        # `aclosing`: a reader that stops early closes the stream now, not at collection.
        async with aclosing(self.events(run_id, after=after)) as stream:
            async for event in stream:
                try:
                    read = typed(event)
                except ValidationError as exc:
                    log.warning("unreadable %s event %d of %s", event.kind, event.seq, run_id)
                    raise MessageError(
                        f"event {event.seq} of {run_id} ({event.kind}) does not fit its kind: "
                        f"{exc.errors()[:3]}",
                        code=ErrorCode.INVALID_MESSAGE,
                    ) from None
                yield read
