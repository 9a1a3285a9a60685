"""Asks the gateway for one model turn and collects its normalized event stream; the
turn's visible text also goes out live, as it is written, as coalesced `RunDelta`s on
core NATS (`Subjects.run_deltas`: never journaled, never on JetStream).

Live text, for a reader in the brain: `generate(request, live=model.live_target(state))`
publishes the turn's text (what `collect` keeps: nothing after a call) coalesced by
`LiveText`, the rest when the stream ends; `runs/streaming.py` merges deltas with the
durable events for readers. Each delta says where its text starts in the step's text
(`offset`), and a reader that joins mid-turn asks (`DeltaAsk`) for the text so far:
`on_ask` answers from the turn this replica is writing, so text written before anyone
listened (a chat's turn starts before its poster can subscribe) still reaches them. A
turn asked again after a lost gateway writes its text again from offset 0: a reader
that merges by offset keeps the first attempt's start, the durable `step` event never.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from tether_brain.clients.histories import GatewayHistories, Outgoing
from tether_brain.state.run import RunState
from tether_common.bus import Bus
from tether_common.errors import ErrorCode, TetherError
from tether_common.messages.deltas import DeltaAsk, RunDelta
from tether_common.messages.gateway import (
    CallRecord,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.runs import Usage

log = logging.getLogger(__name__)

# A fast model writes a token every few milliseconds: one delta per 50 ms (or per 512
# characters waiting) keeps a reader live without a message per token.
DELTA_INTERVAL_S = 0.05
DELTA_MAX_CHARS = 512
# The text so far (for a reader that joined late) goes out in pieces of at most this many
# characters, so no delta nears NATS's 1 MiB payload however long the turn (6 bytes a
# character at worst, as escaped JSON).
SO_FAR_CHARS = 65_536
# A gateway that went silent or away: the turn is asked once more.
GATEWAY_GONE = (ErrorCode.TIMEOUT, ErrorCode.NO_RESPONDERS)


@dataclass(slots=True)
class ModelTurn:
    text: str = ""
    thinking: str = ""
    calls: list[CallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    error: ErrorEvent | None = None


@dataclass(frozen=True, slots=True)
class LiveTarget:
    """Where one turn's live text goes, and what each of its deltas says."""

    subject: str
    run_id: str
    step: int
    seq_after: int
    tenant: str | None
    depth: int | None


class LiveText:
    """One turn's visible text as coalesced deltas: the first at once, then at most one
    per `DELTA_INTERVAL_S` (text written meanwhile waits at most that long, on a timer
    this object owns), or as soon as `DELTA_MAX_CHARS` wait. Publishing is best effort:
    a delta the bus refuses is dropped (the durable `step` event carries the whole
    text), and the turn goes on without live text."""

    def __init__(self, bus: Bus, target: LiveTarget) -> None:
        self.bus = bus
        self.target = target
        self.written: list[str] = []  # the turn's text so far, published or not
        self.sent = 0  # characters published: the next delta's offset
        self.pending: list[str] = []
        self.size = 0
        self.sent_at = float("-inf")
        self.timer: asyncio.Task[None] | None = None
        self.broken = False

    async def add(self, text: str) -> None:
        self.written.append(text)
        self.pending.append(text)
        self.size += len(text)
        wait = self.sent_at + DELTA_INTERVAL_S - time.monotonic()
        if self.size >= DELTA_MAX_CHARS or wait <= 0:
            await self.flush()
        elif self.timer is None:
            self.timer = asyncio.create_task(self._flush_after(wait))

    async def close(self) -> None:
        """Send what is left; the timer, if any, ends first."""
        if self.timer is not None:
            self.timer.cancel()
            await asyncio.gather(self.timer, return_exceptions=True)
            self.timer = None
        await self.flush()

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self.timer = None
        await self.flush()

    async def flush(self) -> None:
        if not self.pending or self.broken:
            return
        text, offset = "".join(self.pending), self.sent
        self.pending.clear()
        self.size = 0
        self.sent += len(text)
        self.sent_at = time.monotonic()
        await self._publish(text, offset)

    async def so_far(self) -> None:
        """The whole text written so far, from offset 0, for a reader that joined late
        (the others drop what they already have of it)."""
        whole = "".join(self.written)
        for start in range(0, len(whole), SO_FAR_CHARS):
            if self.broken:
                return
            await self._publish(whole[start : start + SO_FAR_CHARS], start)

    async def _publish(self, text: str, offset: int) -> None:
        target = self.target
        # Built by the brain from its own values: no validation, one serialisation.
        delta = RunDelta.model_construct(
            run_id=target.run_id,
            step=target.step,
            seq_after=target.seq_after,
            text=text,
            tenant=target.tenant,
            depth=target.depth,
            offset=offset,
        )
        try:
            await self.bus.publish_raw(target.subject, delta.model_dump_json().encode())
        except Exception as exc:  # a delta is ephemeral; the turn must not fail for it
            self.broken = True
            log.warning("run %s: live text stopped: %s", target.run_id, exc)


class ModelPort(Protocol):
    """One model turn: the loop's seam onto the gateway. `ModelClient` is the real one;
    `tether_brain.testing.ScriptedModel` plays a script in process."""

    def live_target(self, state: RunState) -> LiveTarget: ...

    async def generate(
        self, request: GenerateRequest, *, live: LiveTarget | None = None
    ) -> ModelTurn: ...


class ModelClient:
    def __init__(self, bus: Bus, *, timeout_s: float) -> None:
        self.bus = bus
        self.timeout_s = timeout_s
        self.writing: dict[str, LiveText] = {}  # run id -> the turn it is writing here
        self.histories = GatewayHistories()  # what each run's history the gateway keeps

    async def on_ask(self, ask: DeltaAsk) -> None:
        """A reader joined `ask.run_id`'s live text: the text so far, if this replica is
        writing that run's turn (every replica hears the ask; the others stay quiet)."""
        if (text := self.writing.get(ask.run_id)) is not None:
            await text.so_far()

    def live_target(self, state: RunState) -> LiveTarget:
        """The run's delta subject, and its last durable event: the step's own events
        are still pending (committed with the step, after the model's turn)."""
        pending = sum(1 for entry in state.pending if entry.kind == "event")
        return LiveTarget(
            subject=self.bus.subjects.run_deltas(state.run_id),
            run_id=state.run_id,
            step=state.step,
            seq_after=state.event_seq - pending,
            tenant=state.tenant,
            depth=state.depth or None,
        )

    async def generate(
        self, request: GenerateRequest, *, live: LiveTarget | None = None
    ) -> ModelTurn:
        """One turn; a failure of the bus or the provider is an `error` in the turn. The
        history goes as a delta after what the gateway keeps of it (`histories`). A
        gateway that went silent or away is asked once more (a model call has no effect
        outside, so the turn is simply made again). With `live`, the text also goes out
        as deltas while it is written."""
        out = self.histories.outgoing(request)
        turn = await self._sent(out, live)
        if turn.error is not None and turn.error.code in GATEWAY_GONE:
            turn = await self._sent(out, live)
        return turn

    async def _sent(self, out: Outgoing, live: LiveTarget | None) -> ModelTurn:
        """`out` sent; a gateway replica that does not hold the prefix its delta names
        (another replica, a restart, an eviction) is sent the whole request, and one from
        before deltas (which refuses their fields: a rolling upgrade) the plain request."""
        turn = await self._once(out.sent, live)
        code = turn.error.code if turn.error is not None else None
        if code == ErrorCode.PREFIX_UNKNOWN and out.whole is not None:
            turn = await self._once(out.whole, live)
        elif code == ErrorCode.INVALID_MESSAGE and out.sent.keep is not None:
            self.histories.forget(out.sent.run_id)
            plain = (out.whole or out.sent).model_copy(update={"keep": None})
            turn = await self._once(plain, live)
        return turn

    async def _once(self, request: GenerateRequest, live: LiveTarget | None) -> ModelTurn:
        turn = ModelTurn()
        route = self.bus.subjects.generate(request.provider)
        text = LiveText(self.bus, live) if live is not None else None
        if text is not None:
            self.writing[text.target.run_id] = text
        # Closed on the way out, whatever ends the turn (a stop cancels it while it may
        # wait on the live text): a stream left open would tell the gateway only when
        # collected, and the gateway generates for nobody until it is told.
        stream = self.bus.stream(
            route, request, is_terminal=lambda m: m.terminal, timeout=self.timeout_s
        )
        try:
            async for message in stream:
                event = message.event
                collect(turn, event)
                if (
                    text is not None
                    and isinstance(event, ChunkEvent)
                    and event.text
                    and not turn.calls
                ):
                    await text.add(event.text)
        except TetherError as exc:
            turn.error = ErrorEvent(code=exc.code, retryable=exc.retryable, message=exc.message)
        finally:
            await stream.aclose()
            if text is not None:
                if self.writing.get(text.target.run_id) is text:
                    del self.writing[text.target.run_id]
                await text.close()
        return turn


def collect(
    turn: ModelTurn,
    event: ChunkEvent | ThinkingEvent | ToolCallEvent | UsageEvent | DoneEvent | ErrorEvent,
) -> None:
    match event:
        case ChunkEvent():
            if not turn.calls:  # text after a call is an invented result: dropped
                turn.text += event.text
        case ThinkingEvent():
            turn.thinking += event.text
        case ToolCallEvent():
            turn.calls.append(
                CallRecord(
                    id=event.id, name=event.name, arguments=event.arguments, repairs=event.repairs
                )
            )
        case UsageEvent():
            turn.usage = Usage(
                input_tokens=turn.usage.input_tokens + event.input_tokens,
                output_tokens=turn.usage.output_tokens + event.output_tokens,
                cost=turn.usage.cost + event.cost,
                estimated=turn.usage.estimated or event.estimated,
            )
        case DoneEvent():
            turn.finish_reason = event.finish_reason
        case ErrorEvent():
            turn.error = event
