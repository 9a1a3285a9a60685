"""The bus helpers against a real nats-server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider

from tether_common.bus import Bus
from tether_common.errors import BusError, BusTimeoutError, NotFoundError
from tether_common.messages.gateway import (
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEventMessage,
)
from tether_common.messages.runs import RunAccepted, StopRun
from tether_common.subjects import Subjects


async def test_request_reply_and_structured_errors(bus: Bus, nats_url: str, prefix: str) -> None:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def get(req: StopRun) -> RunAccepted:
            if req.run_id == "missing":
                raise NotFoundError("no such run")
            return RunAccepted(run_id=req.run_id, status="running")

        await server.serve(server.subjects.run_stop, get)
        ok = await bus.request(bus.subjects.run_stop, StopRun(run_id="r1"))
        assert ok.status == "running"
        with pytest.raises(NotFoundError, match="no such run"):
            await bus.request(bus.subjects.run_stop, StopRun(run_id="missing"))
    finally:
        await server.close()


async def test_no_responder_is_a_clear_error(bus: Bus) -> None:
    with pytest.raises(BusError) as info:
        await bus.request(bus.subjects.run_stop, StopRun(run_id="r"), timeout=2)
    assert info.value.code in {"no_responders", "timeout"}


async def test_streamed_reply_ends_at_terminal_and_times_out_per_message(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def generate(req: GenerateRequest) -> AsyncIterator[ModelEventMessage]:
            for word in ("a", "b", "c"):
                yield ModelEventMessage(event=ChunkEvent(text=word))
            if req.model == "stall":
                await asyncio.sleep(5)
            yield ModelEventMessage(event=DoneEvent())

        route = bus.subjects.generate("fake")
        await server.serve_stream(route, generate)
        request = GenerateRequest(run_id="r", provider="fake", messages=[])
        got = [
            m.event.kind async for m in bus.stream(route, request, is_terminal=lambda m: m.terminal)
        ]
        assert got == ["chunk", "chunk", "chunk", "done"]

        stalled = request.model_copy(update={"model": "stall"})
        seen: list[str] = []

        async def consume() -> None:
            async for m in bus.stream(
                route, stalled, is_terminal=lambda m: m.terminal, timeout=0.5
            ):
                seen.append(m.event.kind)

        with pytest.raises(BusTimeoutError):
            await consume()
        assert seen == ["chunk", "chunk", "chunk"]
    finally:
        await server.close()


async def test_queue_group_shares_the_load(bus: Bus, nats_url: str, prefix: str) -> None:
    counts = {"one": 0, "two": 0}
    replicas = []
    for name in counts:
        replica = await Bus.connect(nats_url, service=name, subjects=Subjects(prefix))

        async def get(req: StopRun, name: str = name) -> RunAccepted:
            counts[name] += 1
            return RunAccepted(run_id=req.run_id, status="running")

        await replica.serve(replica.subjects.run_stop, get)
        replicas.append(replica)
    try:
        for i in range(60):
            await bus.request(bus.subjects.run_stop, StopRun(run_id=str(i)))
        assert counts["one"] + counts["two"] == 60
        assert counts["one"] > 0
        assert counts["two"] > 0
    finally:
        for replica in replicas:
            await replica.close()


async def test_trace_context_travels_in_headers(bus: Bus, nats_url: str, prefix: str) -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    seen: list[str] = []
    try:

        async def get(req: StopRun) -> RunAccepted:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            seen.append(carrier.get("traceparent", ""))
            return RunAccepted(run_id=req.run_id, status="running")

        await server.serve(server.subjects.run_stop, get)
        with tracer.start_as_current_span("client") as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
            await bus.request(bus.subjects.run_stop, StopRun(run_id="r"))
        assert seen
        assert seen[0].split("-")[1] == trace_id
    finally:
        await server.close()
        assert trace.get_current_span() is not None


async def test_close_finishes_in_flight_handlers(nats_url: str, prefix: str, bus: Bus) -> None:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    finished = asyncio.Event()

    async def slow(req: StopRun) -> RunAccepted:
        await asyncio.sleep(0.3)
        finished.set()
        return RunAccepted(run_id=req.run_id, status="running")

    await server.serve(server.subjects.run_stop, slow)
    pending = asyncio.create_task(bus.request(bus.subjects.run_stop, StopRun(run_id="r")))
    await asyncio.sleep(0.1)
    await server.close()
    assert finished.is_set()
    assert (await pending).run_id == "r"


async def test_closing_its_own_connection_is_no_warning(
    nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29, item 2: every service said `WARNING nats disconnected` as it stopped,
    of the connection it was closing itself; a lost server is still a warning."""
    caplog.set_level(logging.DEBUG, logger="tether_common.bus")
    own = await Bus.connect(nats_url, service="closing", subjects=Subjects(prefix))
    await own.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.getMessage() == "nats connection closed" for r in caplog.records)
