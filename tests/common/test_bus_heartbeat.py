"""Heartbeats on a long request (issue 15, fault 5) against a real nats-server: a `serve`
handler beats while it works, so a slow answer is waited for past the silence limit; a
responder that goes silent is given up after a few missed beats; one that knows no
beats (an older service) is waited for up to the timeout; nobody listening is
`no_responders`, never a timeout."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from nats.aio.msg import Msg

from tether_common.bus import HEARTBEAT_HEADER, Bus
from tether_common.errors import BusError, BusTimeoutError, ConfigError
from tether_common.messages.base import encode
from tether_common.messages.runs import RunAccepted, StopRun
from tether_common.subjects import Route, Subjects

BEAT_S = 0.1  # three missed: 0.3 s of silence ends the wait


def beating(subjects: Subjects) -> Route[StopRun, RunAccepted]:
    """A small route declared to beat, as `tool_execute` is."""
    return replace(subjects.run_stop, beats=True)


async def test_a_beating_handler_is_waited_for_past_the_silence_limit(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def slow(req: StopRun) -> RunAccepted:
            await asyncio.sleep(1.0)  # more than three beats
            return RunAccepted(run_id=req.run_id, status="completed")

        await server.serve(beating(server.subjects), slow)
        reply = await bus.request_watched(
            beating(bus.subjects), StopRun(run_id="r1"), timeout=10, heartbeat_s=BEAT_S
        )
        assert reply.status == "completed"
    finally:
        await server.close()


@pytest.mark.parametrize("beats", [1, 3])
async def test_a_responder_that_stops_beating_is_given_up(
    bus: Bus, nats_url: str, prefix: str, beats: int
) -> None:
    """Like a runner SIGKILLed mid-call: beats, then silence (the timeout is far off)."""
    raw = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def dies(msg: Msg) -> None:
            for _ in range(beats):
                await raw._nc.publish(msg.reply, b"", headers={HEARTBEAT_HEADER: "0.1"})
                await asyncio.sleep(BEAT_S)

        await raw._nc.subscribe(bus.subjects.run_stop.subject, cb=dies)
        await raw.settle()
        with pytest.raises(BusTimeoutError, match="heartbeats stopped"):
            await bus.request_watched(
                beating(bus.subjects), StopRun(run_id="r1"), timeout=60, heartbeat_s=BEAT_S
            )
    finally:
        await raw.close()


async def test_a_responder_without_beats_is_waited_for_up_to_the_timeout(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    """An older service that ignores the header answers late, once: still answered."""
    raw = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def old(msg: Msg) -> None:
            await asyncio.sleep(1.0)
            await raw._nc.publish(msg.reply, encode(RunAccepted(run_id="r1", status="running")))

        await raw._nc.subscribe(bus.subjects.run_stop.subject, cb=old)
        await raw.settle()
        reply = await bus.request_watched(
            beating(bus.subjects), StopRun(run_id="r1"), timeout=10, heartbeat_s=BEAT_S
        )
        assert reply.status == "running"
    finally:
        await raw.close()


async def test_nobody_listening_is_no_responders(bus: Bus) -> None:
    with pytest.raises(BusError) as info:
        await bus.request_watched(
            beating(bus.subjects), StopRun(run_id="r"), timeout=30, heartbeat_s=BEAT_S
        )
    assert info.value.code == "no_responders"
    assert not isinstance(info.value, BusTimeoutError)


@pytest.mark.parametrize("header", ["", "x", "nan", "-1", "1e9"])
async def test_a_strange_interval_never_breaks_the_answer(
    bus: Bus, nats_url: str, prefix: str, header: str
) -> None:
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def fast(req: StopRun) -> RunAccepted:
            return RunAccepted(run_id=req.run_id, status="running")

        await server.serve(beating(server.subjects), fast)
        await server.settle()  # the subscription is at the server before the raw request
        msg = await bus._nc.request(
            bus.subjects.run_stop.subject,
            encode(StopRun(run_id="r1")),
            timeout=5,
            headers={HEARTBEAT_HEADER: header},
        )
        # The first message is the answer or an (empty) beat, never an error.
        assert msg.data == b"" or b"running" in msg.data
    finally:
        await server.close()


async def test_a_heartbeat_costs_no_task_until_a_beat_is_due(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    """A handler that answers without waiting (a calculation) spends nothing on beats:
    while it runs there are as many tasks as for a request that asked for none, and its
    answer is the one message the requester gets."""
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    seen: list[int] = []
    try:

        async def fast(req: StopRun) -> RunAccepted:
            seen.append(len(asyncio.all_tasks()))
            return RunAccepted(run_id=req.run_id, status="running")

        await server.serve(beating(server.subjects), fast)
        await server.settle()  # the subscription is at the server before the raw request
        subject, data = bus.subjects.run_stop.subject, encode(StopRun(run_id="r1"))
        for headers in ({}, {HEARTBEAT_HEADER: "0.1"}, {}):
            msg = await bus._nc.request(subject, data, timeout=5, headers=headers)
            assert b"running" in msg.data
        assert seen[0] == seen[2]
        assert seen[1] == seen[0]
    finally:
        await server.close()


async def test_only_a_route_declared_to_beat_may_be_watched(bus: Bus) -> None:
    with pytest.raises(ConfigError, match="not declared to beat"):
        await bus.request_watched(
            bus.subjects.run_stop, StopRun(run_id="r1"), timeout=5, heartbeat_s=BEAT_S
        )


async def test_a_route_that_does_not_beat_answers_with_its_one_message(
    bus: Bus, nats_url: str, prefix: str
) -> None:
    """A requester asking a non-beating route for beats gets none: on a locked bus its
    server may send one message back, and that must be the answer."""
    server = await Bus.connect(nats_url, service="server", subjects=Subjects(prefix))
    try:

        async def slow(req: StopRun) -> RunAccepted:
            await asyncio.sleep(5 * BEAT_S)
            return RunAccepted(run_id=req.run_id, status="completed")

        await server.serve(server.subjects.run_stop, slow)
        msg = await bus._nc.request(
            bus.subjects.run_stop.subject,
            encode(StopRun(run_id="r1")),
            timeout=5,
            headers={HEARTBEAT_HEADER: f"{BEAT_S:g}"},
        )
        assert b"completed" in msg.data
    finally:
        await server.close()
