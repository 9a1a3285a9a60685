"""A caller gone (issue 30) against a real nats-server: a caller of a cancellable route
that stops waiting (its task cancelled, its stream closed early, silent past its
timeout) sends one notice and the handler serving it is cancelled at once, also while
its server is stopping; a finished request sends none; a route not declared cancellable
is never cancelled; a notice naming another request, a malformed notice, and a notice
that overtakes its own request are handled without harm."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace

import pytest
from nats.aio.subscription import Subscription

from tether_common.bus import Bus
from tether_common.errors import BusTimeoutError, TetherError
from tether_common.messages.base import encode
from tether_common.messages.cancel import CancelNotice
from tether_common.messages.gateway import (
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEventMessage,
)
from tether_common.messages.runs import RunAccepted, StopRun
from tether_common.subjects import QUEUE_GATEWAY, Route, Subjects

WITHIN_S = 2.0  # a cancellation is at once; this is slack for a loaded machine
Generate = Route[GenerateRequest, ModelEventMessage]


def ask(run_id: str = "run_1") -> GenerateRequest:
    return GenerateRequest(
        run_id=run_id, provider="scripted", messages=[ChatMessage(role="user", content="hi")]
    )


def chunk(text: str) -> ModelEventMessage:
    return ModelEventMessage(event=ChunkEvent(text=text))


@dataclass
class Slow:
    """A generation that says one word, then waits `pause_s` (or until `release`) before
    it is done; what became of each request it was given, by run id."""

    pause_s: float = 60.0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    began: dict[str, asyncio.Event] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)
    settled: dict[str, asyncio.Event] = field(default_factory=dict)

    def of(self, run_id: str) -> tuple[asyncio.Event, asyncio.Event]:
        return (
            self.began.setdefault(run_id, asyncio.Event()),
            self.settled.setdefault(run_id, asyncio.Event()),
        )

    async def generate(self, req: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        began, settled = self.of(req.run_id)
        began.set()
        try:
            yield chunk("hello")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), self.pause_s)
            self.outcome[req.run_id] = "finished"
            yield ModelEventMessage(event=DoneEvent())
        except asyncio.CancelledError:
            self.outcome[req.run_id] = "cancelled"
            raise
        finally:
            settled.set()


@pytest.fixture
async def server(nats_url: str, prefix: str) -> AsyncIterator[Bus]:
    bus = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:
        yield bus
    finally:
        await bus.close(timeout=1.0)


async def notices(bus: Bus, queue: str = QUEUE_GATEWAY) -> Subscription:
    return await bus.subscribe_raw(bus.subjects.cancel_notices(queue))


async def no_notice_sent(caller: Bus, sub: Subscription, queue: str = QUEUE_GATEWAY) -> bool:
    """Whether nothing reached the notice subject before a marker the caller sends now:
    one connection's messages arrive in order, so the marker comes first unless a
    notice was published before it."""
    marker = CancelNotice(inbox="marker")
    await caller.publish_raw(caller.subjects.cancel_notices(queue), encode(marker))
    first = await sub.next_msg(timeout=WITHIN_S)
    return CancelNotice.model_validate_json(first.data).inbox == "marker"


async def first_then(caller: Bus, route: Generate, run_id: str, after: str) -> None:
    """Read a stream's first message, then go away as `after` says."""
    stream = caller.stream(route, ask(run_id), is_terminal=lambda m: m.terminal, timeout=60)
    await anext(stream)
    if after == "closes":
        await stream.aclose()
        return
    await anext(stream)  # "cancelled": the test cancels this task while it waits


GoesAway = Callable[[Bus, Generate, Slow], Awaitable[None]]


async def cancelled_task(caller: Bus, route: Generate, slow: Slow) -> None:
    task = asyncio.create_task(first_then(caller, route, "r", "cancelled"))
    await slow.began["r"].wait()
    await asyncio.sleep(0)  # let the caller reach its wait for the next message
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def closed_stream(caller: Bus, route: Generate, slow: Slow) -> None:
    await first_then(caller, route, "r", "closes")


async def silent_past_timeout(caller: Bus, route: Generate, slow: Slow) -> None:
    stream = caller.stream(route, ask("r"), is_terminal=lambda m: m.terminal, timeout=0.3)
    with pytest.raises(BusTimeoutError):
        async for _ in stream:
            pass


@pytest.mark.parametrize(
    "goes_away",
    [cancelled_task, closed_stream, silent_past_timeout],
    ids=["task-cancelled", "stream-closed", "timed-out"],
)
async def test_a_caller_gone_cancels_its_generation(
    bus: Bus, server: Bus, goes_away: GoesAway
) -> None:
    slow = Slow()
    slow.of("r")
    route = server.subjects.generate("scripted")
    assert route.cancellable
    await server.serve_stream(route, slow.generate)
    started = time.monotonic()
    await goes_away(bus, bus.subjects.generate("scripted"), slow)
    await asyncio.wait_for(slow.settled["r"].wait(), WITHIN_S)
    assert slow.outcome["r"] == "cancelled"
    assert time.monotonic() - started < WITHIN_S + 0.5


async def test_a_finished_stream_and_an_error_reply_send_no_notice(bus: Bus, server: Bus) -> None:
    route = server.subjects.generate("scripted")

    async def answers(req: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        if req.run_id == "fails":
            raise TetherError("no such model", code="not_found")
        yield chunk("hello")
        yield ModelEventMessage(event=DoneEvent())

    await server.serve_stream(route, answers)
    sub = await notices(bus)
    mine = bus.subjects.generate("scripted")
    got = [m async for m in bus.stream(mine, ask("ok"), is_terminal=lambda m: m.terminal)]
    assert [m.event.kind for m in got] == ["chunk", "done"]
    # A caller that stops reading at the terminal message has not gone away early.
    async for message in bus.stream(mine, ask("ok"), is_terminal=lambda m: m.terminal):
        if message.terminal:
            break
    with pytest.raises(TetherError, match="no such model"):
        async for _ in bus.stream(mine, ask("fails"), is_terminal=lambda m: m.terminal):
            pass
    assert await no_notice_sent(bus, sub)


async def test_a_route_not_declared_cancellable_is_not_cancelled(bus: Bus, server: Bus) -> None:
    """The tools' routes are such: a call cut short could leave its effect half made."""
    slow = Slow(pause_s=0.3)
    slow.of("r")
    route = replace(server.subjects.generate("scripted"), cancellable=False)
    await server.serve_stream(route, slow.generate)
    sub = await notices(bus)
    await cancelled_task(bus, route, slow)
    await asyncio.wait_for(slow.settled["r"].wait(), WITHIN_S + slow.pause_s)
    assert slow.outcome["r"] == "finished"
    assert await no_notice_sent(bus, sub)


async def test_a_notice_naming_another_request_cancels_nothing(
    bus: Bus, server: Bus, nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Notices for inboxes nobody here answers (one of another connection, one of the
    caller's own), and malformed ones (logged), cancel nothing: the request they did not
    name goes on to its end. The real notice sent after them by the same connection (so
    heard after them) proves they were heard."""
    slow = Slow()
    route = server.subjects.generate("scripted")
    await server.serve_stream(route, slow.generate)
    other = await Bus.connect(nats_url, service="other", subjects=Subjects(prefix))
    try:
        kept_began, kept_settled = slow.of("kept")
        kept = asyncio.create_task(collect(other, route, ask("kept")))
        await kept_began.wait()
        subject = bus.subjects.cancel_notices(QUEUE_GATEWAY)
        with caplog.at_level(logging.WARNING, logger="tether_common.bus.cancelling"):
            for bogus in (
                encode(CancelNotice(inbox=bus._nc.new_inbox())),
                encode(CancelNotice(inbox=other._nc.new_inbox())),  # the caller's own prefix
                b"not json",
                b'{"inbox": ""}',
            ):
                await bus.publish_raw(subject, bogus)
            slow.of("r")
            await cancelled_task(bus, route, slow)
            await asyncio.wait_for(slow.settled["r"].wait(), WITHIN_S)
        assert slow.outcome["r"] == "cancelled"
        assert caplog.text.count("ignored cancel notice") == 2, caplog.text
        assert not kept_settled.is_set()
        slow.release.set()
        got = await asyncio.wait_for(kept, WITHIN_S)
        assert [m.event.kind for m in got] == ["chunk", "done"]
        assert slow.outcome["kept"] == "finished"
    finally:
        await other.close(timeout=1.0)


async def collect(
    caller: Bus, route: Generate, request: GenerateRequest
) -> list[ModelEventMessage]:
    return [m async for m in caller.stream(route, request, is_terminal=lambda m: m.terminal)]


async def test_a_notice_that_overtakes_its_request_drops_the_request(bus: Bus, server: Bus) -> None:
    slow = Slow(pause_s=0.0)
    route = server.subjects.generate("scripted")
    await server.serve_stream(route, slow.generate)
    inbox = bus._nc.new_inbox()
    await bus.publish_raw(
        bus.subjects.cancel_notices(QUEUE_GATEWAY), encode(CancelNotice(inbox=inbox))
    )
    await bus.settle()
    await server.settle()
    await bus.publish_raw(route.subject, encode(ask("overtaken")), reply=inbox)
    got = [m async for m in bus.stream(route, ask("after"), is_terminal=lambda m: m.terminal)]
    assert [m.event.kind for m in got] == ["chunk", "done"]
    assert "overtaken" not in slow.began


async def test_stopping_cancels_a_handler_whose_caller_goes_meanwhile(
    bus: Bus, server: Bus
) -> None:
    """The brain stops first, then the gateway: the gateway's stop does not wait out a
    generation nobody reads (it used to wait its whole timeout, 10 s)."""
    slow = Slow()
    slow.of("r")
    route = server.subjects.generate("scripted")
    await server.serve_stream(route, slow.generate)
    caller = asyncio.create_task(first_then(bus, route, "r", "cancelled"))
    await slow.began["r"].wait()
    started = time.monotonic()
    stopping = asyncio.create_task(server.stop_taking(timeout=30.0))
    await asyncio.sleep(0)  # the server has begun to stop (its subscriptions drain)
    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    await asyncio.wait_for(stopping, WITHIN_S)
    assert slow.outcome["r"] == "cancelled"
    assert time.monotonic() - started < WITHIN_S


async def test_a_watched_request_of_a_cancellable_route_is_cancelled_too(
    bus: Bus, server: Bus
) -> None:
    route = replace(server.subjects.run_stop, beats=True, cancellable=True)
    began, ended = asyncio.Event(), asyncio.Event()
    outcome: list[str] = []

    async def slow(req: StopRun) -> RunAccepted:
        began.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        finally:
            ended.set()
        return RunAccepted(run_id=req.run_id, status="stopped")

    await server.serve(route, slow)
    waiting = asyncio.create_task(
        bus.request_watched(
            replace(bus.subjects.run_stop, beats=True, cancellable=True),
            StopRun(run_id="r"),
            timeout=60,
            heartbeat_s=0.5,
        )
    )
    await began.wait()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await asyncio.wait_for(ended.wait(), WITHIN_S)
    assert outcome == ["cancelled"]
