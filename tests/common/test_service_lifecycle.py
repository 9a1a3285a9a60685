"""A service's shutdown order (tether_common.service.Service.stop), on a real NATS server:
it stops taking messages first, answers the request it is handling, then stops its
background tasks, then runs the service's own `on_stop`; and `Background` reports a
background task that ends by itself."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tether_common.background import Background
from tether_common.bus import Bus
from tether_common.errors import BusError, ErrorCode
from tether_common.messages.base import WireModel
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_common.subjects import Route

WAIT_S = 60.0  # generous: the CI machine is slow


class Ask(WireModel):
    n: int


class Answer(WireModel):
    n: int


async def probe(client: Bus, route: Route[Ask, Answer], n: int) -> str:
    """ "answered" or the error code a request to `route` met."""
    try:
        await client.request(route, Ask(n=n), timeout=WAIT_S)
    except BusError as exc:
        return exc.code
    return "answered"


async def test_stop_answers_the_request_in_flight_and_takes_no_new_one(
    nats_url: str, prefix: str, bus: Bus
) -> None:
    service = Service(
        "lifecycle-test",
        CommonSettings(nats_url=nats_url, subject_prefix=prefix),
        uses_db=False,
    )
    route = Route(f"{prefix}.test.work", Ask, Answer, "lifecycle_test")
    order: list[str] = []
    handled: list[int] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def work(ask: Ask) -> Answer:
        handled.append(ask.n)
        if ask.n == 1:  # the request in flight when stopping begins
            started.set()
            await release.wait()
            order.append("answered the request in flight")
        return Answer(n=ask.n)

    async def loop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            order.append("background stopped")

    async def on_stop() -> None:
        order.append("on_stop")

    await service.start()
    await service.bus.serve(route, work)
    service.background.start("a loop", loop())
    assert await probe(bus, route, 0) == "answered"

    first = asyncio.create_task(bus.request(route, Ask(n=1), timeout=WAIT_S))
    await asyncio.wait_for(started.wait(), WAIT_S)
    stopping = asyncio.create_task(service.stop(on_stop))
    # Probes sent while the drain's UNSUB is on its way may still be answered; once one
    # meets no responder, the service takes nothing more.
    n, outcome = 2, "answered"
    async with asyncio.timeout(WAIT_S):
        while outcome == "answered":
            outcome = await probe(bus, route, n)
            n += 1
    assert outcome == ErrorCode.NO_RESPONDERS
    taken = list(handled)
    later = await asyncio.gather(*(probe(bus, route, m) for m in range(n, n + 5)))
    assert later == [ErrorCode.NO_RESPONDERS] * 5
    assert handled == taken
    assert not first.done()
    assert order == []  # nothing stops while a request is in flight

    release.set()
    assert (await asyncio.wait_for(first, WAIT_S)).n == 1
    await asyncio.wait_for(stopping, WAIT_S)
    assert order == ["answered the request in flight", "background stopped", "on_stop"]
    assert not service.bus.connected


async def test_background_reports_a_task_that_ends_by_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.lifecycle")
    caplog.set_level(logging.INFO, logger=logger.name)
    group = Background(logger)

    async def crash() -> None:
        raise RuntimeError("the loop broke")

    crashing = group.start("a crashing loop", crash())
    group.start("a loop", asyncio.Event().wait())
    await asyncio.wait([crashing], timeout=WAIT_S)  # its end is reported before this returns
    assert len(group) == 1
    assert "a crashing loop ended by an error" in caplog.text
    await group.stop()
    assert len(group) == 0
    assert "a loop" not in caplog.text.replace("a crashing loop", "")
