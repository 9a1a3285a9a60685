"""`settle` is a barrier: once it returns, the server has processed the subscriptions the
connection made before it, so a message another connection sends next reaches them.
nats-py's own `flush()` is not one (its PING overtakes a SUB still queued for the client's
flusher task); the approvals notifier test lost a notice that way about one time in 12.

Each round subscribes on a new subject and, right after the barrier, sends a request from
another connection without the Bus's no-responders retry: a server that has not yet seen
the subscription answers "no responders" at once, so a broken barrier fails fast."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tether_common.bus import Bus, settle
from tether_common.errors import BusError
from tether_common.messages.base import encode
from tether_common.messages.runs import RunAccepted, StopRun
from tether_common.subjects import Subjects
from tether_common.testing import until

ROUNDS = 150  # a broken barrier lost about 8 % of rounds on this machine


@pytest.fixture
async def asker(nats_url: str) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_url)
    try:
        yield nc
    finally:
        await nc.close()


async def test_a_subscription_is_at_the_server_once_settled(
    nats_url: str, prefix: str, asker: Client
) -> None:
    nc = await nats.connect(nats_url)
    try:

        async def answer(msg: Msg) -> None:
            await msg.respond(b"here")

        for round_ in range(ROUNDS):
            subject = f"{prefix}.settle.{round_}"
            await nc.subscribe(subject, cb=answer)
            await settle(nc)
            reply = await asker.request(subject, b"", timeout=10)
            assert reply.data == b"here", f"round {round_}"
    finally:
        await nc.close()


async def test_a_bus_serves_once_serve_returns(nats_url: str, prefix: str, asker: Client) -> None:
    """`Bus.serve` settles before it returns: a service that says it is ready is heard."""
    for round_ in range(ROUNDS):
        server = await Bus.connect(
            nats_url, service="server", subjects=Subjects(f"{prefix}s{round_}")
        )
        try:

            async def stop(req: StopRun) -> RunAccepted:
                return RunAccepted(run_id=req.run_id, status="stopped")

            await server.serve(server.subjects.run_stop, stop)
            reply = await asker.request(
                server.subjects.run_stop.subject, encode(StopRun(run_id="r1")), timeout=10
            )
            assert b"stopped" in reply.data, f"round {round_}"
        finally:
            await server.close()


async def test_a_raw_subscription_hears_the_next_publish(
    nats_url: str, prefix: str, asker: Client
) -> None:
    """`subscribe_raw` (live tails, a client waiting for notices) settles too."""
    listener = await Bus.connect(nats_url, service="listener", subjects=Subjects(prefix))
    try:
        for round_ in range(ROUNDS):
            subject = f"{prefix}.raw.{round_}"
            sub = await listener.subscribe_raw(subject)
            await asker.publish(subject, b"told")
            heard = await sub.next_msg(timeout=10)
            assert heard.data == b"told", f"round {round_}"
            await sub.unsubscribe()
    finally:
        await listener.close()


async def test_a_cancelled_settle_leaves_the_connection_whole(
    nats_url: str, prefix: str, asker: Client
) -> None:
    """A follower that goes away while its subscription settles (an SSE client closing)
    cancels `settle` at any point of its two waits. The connection must go on hearing:
    nats-py resolves each PONG's future without looking, so a cancelled one kills its
    reader (`InvalidStateError`), and the client, still "connected", hears nothing more."""
    nc = await nats.connect(nats_url)
    try:
        subject = f"{prefix}.cancel"
        caught = 0
        for round_ in range(ROUNDS):
            await nc.subscribe(f"{subject}.{round_}")
            settling = asyncio.ensure_future(settle(nc))
            for _ in range(round_ % 10):  # cancelled before, at and after each wait
                await asyncio.sleep(0)
            pinging = bool(nc._pongs)
            asked = settling.cancel()  # False: it had already returned
            await asyncio.gather(settling, return_exceptions=True)
            caught += pinging
            # The caller's cancellation is kept, never swallowed on the way.
            assert settling.cancelled() or not asked, f"round {round_}"
        sub = await nc.subscribe(subject)
        await settle(nc)
        await asker.publish(subject, b"still here")
        heard = await sub.next_msg(timeout=10)
        assert heard.data == b"still here"
        assert nc._reading_task is not None
        assert not nc._reading_task.done()
        assert caught, "no round cancelled a settle while its PONG was awaited"
    finally:
        await nc.close()


async def test_a_client_whose_reader_stopped_reconnects_at_the_next_probe(
    nats_url: str, prefix: str
) -> None:
    """Whatever stops nats-py's reader, the brain's NATS probe (`round_trip`) fails once,
    and the client reconnects with a new reader instead of staying deaf for minutes."""
    bus = await Bus.connect(nats_url, service="deaf", subjects=Subjects(prefix))
    try:
        await bus.round_trip(timeout=5)
        reader = bus._nc._reading_task
        assert reader is not None
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        with pytest.raises(BusError):
            await bus.round_trip(timeout=0.5)

        async def heard() -> bool:
            await bus.round_trip(timeout=1)
            return True

        # Reconnecting: a few attempts 0.25 s apart at most; the bound is the old loop's
        # (100 tries of up to 1 s, 0.1 s apart).
        await until(heard, timeout=110, every=0.1, what="NATS heard again", ignoring=(BusError,))
        assert bus._nc._reading_task is not reader
    finally:
        await bus.close()
