"""The answers to streamed requests and to pipelined JetStream publishes, all taken on one
subscription of the connection's inbox (`tether_common.bus.replies`), against a real
nats-server: many requests at once each get exactly their own answers, in order, with no
subscription made per request; an answer that comes after its caller stopped is dropped
and forgets nothing; a publish no stream takes is an error, a duplicate one is not; reply
subjects cannot be guessed from one another; a responder that floods its reply ends that
request, not the caller's memory."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tether_common.bus import Bus
from tether_common.bus import replies as replies_module
from tether_common.errors import BusError, ErrorCode
from tether_common.messages.gateway import ChunkEvent, DoneEvent, GenerateRequest, ModelEventMessage
from tether_common.subjects import Subjects

CHUNKS = 5


async def _echoing_server(nats_url: str, prefix: str, done: asyncio.Event) -> Bus:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))

    async def generate(req: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
        for i in range(CHUNKS):
            yield ModelEventMessage(event=ChunkEvent(text=f"{req.run_id}:{i}"))
            await asyncio.sleep(0)  # interleave the requests' answers on the wire
        if req.model == "linger":
            await done.wait()  # the caller has stopped listening by now
            for i in range(CHUNKS):  # answers nobody waits for any more
                yield ModelEventMessage(event=ChunkEvent(text=f"late:{i}"))
        yield ModelEventMessage(event=DoneEvent())

    await server.serve_stream(server.subjects.generate("fake"), generate)
    return server


async def _texts(bus: Bus, run_id: str, model: str = "m") -> list[str]:
    request = GenerateRequest(run_id=run_id, provider="fake", model=model, messages=[])
    route = bus.subjects.generate("fake")
    return [
        m.event.text
        async for m in bus.stream(route, request, is_terminal=lambda m: m.terminal)
        if isinstance(m.event, ChunkEvent)
    ]


async def test_concurrent_streams_share_one_subscription_and_never_cross(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    server = await _echoing_server(nats_url, prefix, asyncio.Event())
    try:
        await _texts(bus, "warm")  # the shared subscription is made on first use
        subscriptions = len(bus._nc._subs)
        seen: list[int] = []

        async def one(n: int) -> list[str]:
            texts = await _texts(bus, f"r{n}")
            seen.append(len(bus._nc._subs))
            return texts

        answers = await asyncio.gather(*(one(n) for n in range(40)))
        for n, texts in enumerate(answers):
            assert texts == [f"r{n}:{i}" for i in range(CHUNKS)]
        assert set(seen) == {subscriptions}  # none made or left per request
    finally:
        await server.close()


async def test_an_answer_after_its_caller_stopped_is_dropped(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    done = asyncio.Event()
    server = await _echoing_server(nats_url, prefix, done)
    try:
        request = GenerateRequest(run_id="gone", provider="fake", model="linger", messages=[])
        stream = bus.stream(
            bus.subjects.generate("fake"), request, is_terminal=lambda m: m.terminal
        )
        first = await anext(stream)
        assert isinstance(first.event, ChunkEvent)
        assert first.event.text == "gone:0"
        await stream.aclose()  # the caller goes: the rest of the answers come to nobody
        done.set()
        # Later requests are answered as before, and their answers are their own.
        assert await _texts(bus, "next") == [f"next:{i}" for i in range(CHUNKS)]
        assert bus._requests._replies._waiting == {}  # nothing kept for the one that left
    finally:
        await server.close()


async def test_pipelined_publishes_are_acknowledged_in_order(bus: Bus) -> None:
    await bus.ensure_streams()
    subject = bus.subjects.run_events("run-replies")
    items = [(subject, json.dumps({"n": n}).encode(), f"run-replies:{n}") for n in range(20)]
    await bus.js_publish_many(items)
    await bus.js_publish_many(items[:3])  # the same ids again: deduplicated, not an error
    stored = []
    async for data in bus.replay(subject, idle_s=0.5):
        if data is None:
            break
        stored.append(json.loads(data)["n"])
    assert stored == list(range(20))
    assert bus._requests._replies._waiting == {}


async def test_a_publish_no_stream_takes_is_an_error(bus: Bus) -> None:
    await bus.ensure_streams()
    with pytest.raises(BusError, match="no stream takes this subject") as info:
        await bus.js_publish_many([("nobody.stores.this", b"{}", "x:1")])
    assert info.value.code == ErrorCode.NO_RESPONDERS
    assert bus._requests._replies._waiting == {}


async def test_reply_subjects_cannot_be_guessed_from_one_another(bus: Bus) -> None:
    replies = bus._requests._replies
    opened = [await replies.open() for _ in range(50)]
    tokens = [r.token for r in opened]
    for reply in opened:
        replies.close(reply)
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) == 16 for t in tokens)  # 64 random bits each, not a counter
    assert len({r.subject.rsplit(".", 1)[0] for r in opened}) == 1  # one subscription


async def test_a_responder_flooding_its_reply_ends_that_request_only(
    bus: Bus, nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replies_module, "BACKLOG", 5)
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def flood(req: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
            count = 50 if req.model == "flood" else 3
            for i in range(count):
                yield ModelEventMessage(event=ChunkEvent(text=f"{req.run_id}:{i}"))
            yield ModelEventMessage(event=DoneEvent())

        await server.serve_stream(server.subjects.generate("fake"), flood)
        request = GenerateRequest(run_id="f", provider="fake", model="flood", messages=[])
        stream = bus.stream(
            bus.subjects.generate("fake"), request, is_terminal=lambda m: m.terminal
        )
        await anext(stream)  # the request is out; its answers pile up unread meanwhile
        await asyncio.sleep(0.3)
        with pytest.raises(BusError, match="answers unread"):
            await anext(stream)
        await stream.aclose()
        assert await _texts(bus, "calm") == [f"calm:{i}" for i in range(3)]
    finally:
        await server.close()
