"""Reading what runs produce: their event stream (live from JetStream, the journal for
an ended run whose last events never reached the stream), their live text, and their
stored outputs, page by page. The caller has authorised the run first.

The live API (used by the SSE route, `runs.follow` and the OpenAI face):
`Streams.live(run_id, after, deltas=True, idle_s=None)` yields the run's durable
`RunEvent`s after `after`, exactly as `events` does, and between them the model's text
as `RunDelta`s while it is written. Order: a delta comes after the durable event its
`seq_after` names and before the next one; one that arrives after the next durable
event was yielded is stale (that event carries its text) and is dropped, and one ahead
of a reader still catching up is held (at most `DELTA_BACKLOG`) until the reader gets
there. Deltas are ephemeral, and nothing replays them; but a reader that connects
mid-turn asks the replica writing the turn for its text so far (`DeltaAsk`, answered as
one delta from offset 0), so text written before it listened still reaches it (a chat's
turn starts writing before its poster can follow it). Each delta's `offset` lets the
reader drop what it already has: nothing is yielded twice, and one heard before the
answer, past a gap, waits a little for it (`merging`).
"""

from __future__ import annotations

import asyncio
import logging
from base64 import b64decode
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any

from tether_brain.persistence.store import RunStore
from tether_brain.runs.merging import TextMerge
from tether_common.bus import Bus
from tether_common.errors import MessageError
from tether_common.messages.base import decode
from tether_common.messages.deltas import DeltaAsk, RunDelta
from tether_common.messages.outputs import MAX_INLINE_BYTES, GetOutput, OutputContent
from tether_common.messages.runs import TERMINAL_STATUSES, RunEvent
from tether_common.metrics import bus_errors

log = logging.getLogger(__name__)

# Deltas held for one reader (ahead of it, or queued behind a slow one); beyond this the
# newest are dropped: they are ephemeral, and the durable events carry every word.
DELTA_BACKLOG = 256
Live = RunEvent | RunDelta


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

    async def live(
        self, run_id: str, after: int, *, deltas: bool = True, idle_s: float | None = None
    ) -> AsyncIterator[Live]:
        """The run's durable events after `after` (as `events`), with its live text
        between them when `deltas` (see the module for the order). The caller has
        authorised the run (`follow`)."""
        if not deltas:
            async for event in self.events(run_id, after, idle_s=idle_s):
                yield event
            return
        queue: asyncio.Queue[Live | None] = asyncio.Queue()
        # Subscribed before the replay starts: the replay's consumer is created on the
        # same connection after this SUB, so no delta written meanwhile is missed.
        sub = await self.bus.subscribe_raw(self.bus.subjects.run_deltas(run_id))
        hearing = asyncio.create_task(_hear(sub, run_id, queue))
        await self._ask(run_id)  # after the SUB on the same connection: its answer is heard
        replaying = asyncio.create_task(self._pump(run_id, after, idle_s, queue))
        try:
            async for item in _ordered(queue, after):
                yield item
            await replaying  # the replay's own failure, if that is what ended it
        finally:
            for task in (hearing, replaying):
                task.cancel()
            await asyncio.gather(hearing, replaying, return_exceptions=True)
            with suppress(Exception):
                await sub.unsubscribe()

    async def _ask(self, run_id: str) -> None:
        """Ask for the text written so far; best effort (the step's event carries it)."""
        try:
            await self.bus.publish_raw(
                self.bus.subjects.run_deltas_ask, DeltaAsk(run_id=run_id).model_dump_json().encode()
            )
        except Exception as exc:
            log.warning("run %s: could not ask for the live text so far: %s", run_id, exc)

    async def _pump(
        self, run_id: str, after: int, idle_s: float | None, queue: asyncio.Queue[Live | None]
    ) -> None:
        try:
            async for event in self.events(run_id, after, idle_s=idle_s):
                queue.put_nowait(event)
        finally:
            queue.put_nowait(None)  # the durable stream ended (or failed: awaited above)


async def _hear(sub: Any, run_id: str, queue: asyncio.Queue[Live | None]) -> None:
    """The run's deltas into the reader's queue; a body that is not a delta of this run
    is logged, counted and dropped, and a reader far behind loses deltas, not events."""
    async for msg in sub.messages:
        try:
            delta = decode(RunDelta, bytes(msg.data))
        except MessageError as exc:
            bus_errors.add(1, {"service": "brain", "code": exc.code})
            log.warning("run %s: a delta that does not decode was dropped: %s", run_id, exc)
            continue
        if delta.run_id != run_id:
            bus_errors.add(1, {"service": "brain", "code": "foreign_delta"})
            log.warning("run %s: a delta naming run %s was dropped", run_id, delta.run_id)
        elif queue.qsize() < DELTA_BACKLOG:
            queue.put_nowait(delta)


async def _ordered(queue: asyncio.Queue[Live | None], after: int) -> AsyncIterator[Live]:
    """Durable events as they come; each delta after the event its `seq_after` names,
    merged by its place in the step's text (`merging.TextMerge`)."""
    last = after
    held: list[RunDelta] = []
    text = TextMerge()
    while True:
        if (wait_s := text.wait_s()) is None:
            item = await queue.get()
        else:
            try:
                item = await asyncio.wait_for(queue.get(), wait_s)
            except TimeoutError:  # the gap a delta waits on stays open
                for delta in text.expire():
                    yield delta
                continue
        if item is None:
            return
        if isinstance(item, RunDelta):
            if item.seq_after == last:
                for delta in text.take(item):
                    yield delta
            elif item.seq_after > last and len(held) < DELTA_BACKLOG:
                held.append(item)
            continue
        yield item
        last = item.seq
        text.passed(last)
        for ready in [d for d in held if d.seq_after == last]:
            for delta in text.take(ready):
                yield delta
        held = [d for d in held if d.seq_after > last]
