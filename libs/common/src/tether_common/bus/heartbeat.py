"""Heartbeats on a long request (`Bus.request_watched`): the requester names an interval
in `HEARTBEAT_HEADER`; a `serve` handler that reads it sends an empty message carrying
the same header to the reply inbox at once and then every interval while the handler
runs, so the requester learns of a dead responder after a few missed beats instead of at
its timeout. A responder that does not know the header sends none (the requester then
waits for its whole timeout, as before): the header is the contract's version."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import suppress

from nats.aio.client import Client as NatsClient

HEARTBEAT_HEADER = "Tether-Heartbeat"
HEARTBEAT_RANGE_S = (0.1, 60.0)


def heartbeat_of(headers: Mapping[str, str]) -> float | None:
    """The interval a request asks for, clamped; None when it asks for none."""
    raw = headers.get(HEARTBEAT_HEADER)
    try:
        every = float(raw) if raw else None
    except ValueError:
        return None
    if every is None or every != every:  # absent, or NaN
        return None
    return min(max(every, HEARTBEAT_RANGE_S[0]), HEARTBEAT_RANGE_S[1])


class Heartbeat:
    """The beats to one requester while its handler runs. Loop callbacks, not a task per
    request: a handler that never waits (a calculation) answers before its first beat is
    due, and the task made, cancelled and gathered for each such request cost ~16 µs (4%
    of the tools-runner's CPU per step); a task is made only for a beat actually sent."""

    __slots__ = ("_due", "_every", "_inbox", "_nc", "_sending", "_track")

    def __init__(
        self,
        nc: NatsClient,
        inbox: str,
        every: float,
        track: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self._nc, self._inbox, self._every, self._track = nc, inbox, every, track
        self._due: asyncio.Handle | None = None
        self._sending: asyncio.Task[None] | None = None

    def start(self) -> None:
        """The first beat at the loop's next turn: when the handler first waits."""
        self._due = asyncio.get_running_loop().call_soon(self._beat)

    def _beat(self) -> None:
        self._sending = asyncio.create_task(self._send())
        self._track(self._sending)
        self._due = asyncio.get_running_loop().call_later(self._every, self._beat)

    async def _send(self) -> None:
        with suppress(Exception):  # a missed beat is the requester's to judge
            await self._nc.publish(self._inbox, b"", headers={HEARTBEAT_HEADER: f"{self._every:g}"})

    def stop(self) -> None:
        """No beat after this (one being sent is cancelled): the reply comes next."""
        if self._due is not None:
            self._due.cancel()
        if self._sending is not None:
            self._sending.cancel()
