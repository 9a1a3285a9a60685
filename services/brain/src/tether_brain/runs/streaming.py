"""Reading what runs produce: their event stream (live from JetStream, the journal for
an ended run whose last events never reached the stream) and their stored outputs, page
by page. The caller has authorised the run first."""

from __future__ import annotations

from base64 import b64decode
from collections.abc import AsyncIterator

from tether_brain.persistence.store import RunStore
from tether_common.bus import Bus
from tether_common.messages.base import decode
from tether_common.messages.outputs import MAX_INLINE_BYTES, GetOutput, OutputContent
from tether_common.messages.runs import TERMINAL_STATUSES, RunEvent


class Streams:
    def __init__(self, bus: Bus, store: RunStore) -> None:
        self.bus = bus
        self.store = store

    async def read_output(self, run_id: str, ref: str, offset: int) -> OutputContent:
        """One page of an output `run_id` made (the caller has authorised the run)."""
        query = GetOutput(ref=ref, run_id=run_id, offset=offset, limit=MAX_INLINE_BYTES)
        return await self.bus.request(self.bus.subjects.output_get, query, timeout=30.0)

    async def output_bytes(
        self, run_id: str, ref: str, first: OutputContent
    ) -> AsyncIterator[bytes]:
        """The output's bytes, page by page from `first` on."""
        page = first
        while True:
            data = page.content.encode() if page.encoding == "utf-8" else b64decode(page.content)
            yield data
            if page.eof or not data:
                return
            page = await self.read_output(run_id, ref, page.offset + len(data))

    async def events(
        self, run_id: str, after: int, *, idle_s: float | None = None
    ) -> AsyncIterator[RunEvent]:
        """The run's events after `after`, live until `run.end` (the caller has passed
        `follow` first), or until `idle_s` of silence from a live run when given. An
        ended run whose last events never reached the stream (its publish failed after
        the committed end) has them read from its journal."""
        subject = self.bus.subjects.run_events(run_id)
        replay = (
            self.bus.replay(subject) if idle_s is None else self.bus.replay(subject, idle_s=idle_s)
        )
        async for data in replay:
            if data is None:
                status, _ = await self.store.queries.status(run_id)
                if status in TERMINAL_STATUSES:
                    for row in await self.store.queries.events(run_id, after):
                        yield RunEvent.model_validate(row)
                    return
                if idle_s is not None:
                    return
                continue
            event = decode(RunEvent, data)
            if event.seq > after:
                after = event.seq
                yield event
            if event.kind == "run.end":
                return
