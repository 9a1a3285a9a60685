"""`Requests`: the sending side of the bus. A typed request and its decoded reply, a
watched request whose responder beats, a streamed reply, plain publishes and raw
subscriptions. "No responders" is retried for a short grace: a subscriber that has just
(re)started can miss a request for a moment even after its flush.

A caller of a cancellable route (`Route.cancellable`) that stops waiting before the last
answer (its task cancelled, the stream closed early, a timeout) publishes one
`CancelNotice` naming the request's reply inbox, so the serving replica stops working for
nobody (`cancelling`). Nothing more is sent while the caller waits. Streamed and watched
requests do this; a plain `request` (nats-py's own reply inbox) does not."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel

from tether_common.bus.heartbeat import HEARTBEAT_HEADER
from tether_common.bus.link import Link, trace_headers
from tether_common.bus.replies import Replies
from tether_common.bus.settle import settle
from tether_common.errors import BusError, BusTimeoutError, ConfigError, ErrorCode, TetherError
from tether_common.messages.base import decode_reply, encode
from tether_common.messages.cancel import CancelNotice
from tether_common.retrying import Policy, delay_s, retrying
from tether_common.subjects import Route, Subjects

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)

NO_RESPONDERS_GRACE_S = 2.0
NO_RESPONDERS_RETRIES = 6  # a streamed request's re-sends (about 1.1 s in all)
# The waits between sends that met "no responders": 20 ms doubling to 0.5 s.
NO_RESPONDERS = Policy("no responders", 0.02, 0.5, jitter=False)


def _no_responders(msg: Msg) -> bool:
    headers = msg.headers or {}
    return not msg.data and headers.get("Status") == "503"


class Requests:
    """Requests, streamed replies and publishes over one `Link`."""

    def __init__(self, link: Link, subjects: Subjects, replies: Replies) -> None:
        self._link = link
        self._subjects = subjects
        self._replies = replies

    async def request(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        timeout: float = 10.0,
        subject: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Rep:
        """Send a command and decode its reply; an error reply raises the matching error.
        `headers` go along (e.g. `Authorization: Bearer <token>`)."""
        target = subject or route.subject
        with tracer.start_as_current_span(f"send {target}", kind=SpanKind.CLIENT) as span:
            span.set_attribute("messaging.system", "nats")
            span.set_attribute("messaging.destination.name", target)
            data = await self.request_raw(target, encode(body), timeout=timeout, headers=headers)
            return decode_reply(route.reply, data)

    async def request_raw(
        self,
        subject: str,
        data: bytes,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """One request; "no responders" is retried briefly, because a subscriber that has
        just (re)started can miss a request for a moment even after its flush."""
        grace = replace(NO_RESPONDERS, within_s=min(timeout, NO_RESPONDERS_GRACE_S))
        try:
            # Quietly: every restart of a subscriber meets a few.
            async for attempt in retrying(grace, on=NoRespondersError, level=logging.DEBUG):
                with attempt:
                    sent = trace_headers() | dict(headers or {})
                    msg = await self._link.nc.request(subject, data, timeout=timeout, headers=sent)
                    return bytes(msg.data)
        except NoRespondersError:
            self._link.count_error(ErrorCode.NO_RESPONDERS)
            raise BusError(
                f"no service answers on {subject}", code=ErrorCode.NO_RESPONDERS
            ) from None
        except NatsTimeoutError:
            self._link.count_error(ErrorCode.TIMEOUT)
            raise BusTimeoutError(f"no reply on {subject} within {timeout}s") from None
        raise AssertionError("unreachable: the last failure is raised")

    async def request_watched(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        timeout: float,
        heartbeat_s: float,
        missed: int = 3,
    ) -> Rep:
        """A request whose responder beats while it works (`HEARTBEAT_HEADER`): once a
        beat has come, `missed` beats of silence end the wait with `BusTimeoutError`, as
        `timeout` does in any case. "No responders" is retried for the usual grace. Only a
        route declared to beat (`Route.beats`) may be watched: its servers are the ones
        the bus permissions let answer one request with several messages."""
        if not route.beats:
            raise ConfigError(f"{route.subject} is not declared to beat (Route.beats)")
        target = route.subject
        with tracer.start_as_current_span(f"send {target}", kind=SpanKind.CLIENT) as span:
            span.set_attribute("messaging.system", "nats")
            span.set_attribute("messaging.destination.name", target)
            sent = trace_headers() | {HEARTBEAT_HEADER: f"{heartbeat_s:g}"}
            data = await self._watched(route, encode(body), sent, timeout, heartbeat_s * missed)
            return decode_reply(route.reply, data)

    async def _watched(
        self,
        route: Route[Any, Any],
        data: bytes,
        headers: dict[str, str],
        timeout: float,
        silence: float,
    ) -> bytes:
        nc, target = self._link.nc, route.subject
        now = time.monotonic()
        deadline, grace = now + timeout, now + min(timeout, NO_RESPONDERS_GRACE_S)
        failures, alive = 0, False
        reply = await self._replies.open()
        inbox = reply.subject
        answered = False  # the responder has sent its one answer (or nobody took it)
        try:
            await nc.publish(target, data, reply=inbox, headers=headers)
            while True:
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    msg = await reply.next(min(left, silence) if alive else left)
                except TimeoutError:
                    self._link.count_error(ErrorCode.TIMEOUT)
                    why = "heartbeats stopped" if alive and left > 0 else "no reply"
                    raise BusTimeoutError(f"{why} on {target} (limit {timeout}s)") from None
                if _no_responders(msg):
                    failures += 1
                    delay = delay_s(NO_RESPONDERS, failures)
                    if time.monotonic() + delay > grace:
                        answered = True  # no responder took it: nothing to cancel
                        self._link.count_error(ErrorCode.NO_RESPONDERS)
                        raise BusError(
                            f"no service answers on {target}", code=ErrorCode.NO_RESPONDERS
                        )
                    await asyncio.sleep(delay)
                    await nc.publish(target, data, reply=inbox, headers=headers)
                    continue
                if (msg.headers or {}).get(HEARTBEAT_HEADER) and not msg.data:
                    alive = True
                    continue
                answered = True
                return bytes(msg.data)
        finally:
            self._replies.close(reply)
            if not answered:
                await self._caller_gone(route, inbox)

    async def stream(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        is_terminal: Callable[[Rep], bool],
        timeout: float = 300.0,
        subject: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Rep, None]:
        """A streamed reply: many messages to one inbox, ended by a terminal message.
        `timeout` bounds the wait for each message, not the whole stream."""
        target = subject or route.subject
        # Not made current: the context must not leak across this generator's yields.
        span = tracer.start_span(f"send {target}", kind=SpanKind.CLIENT)
        span.set_attribute("messaging.system", "nats")
        span.set_attribute("messaging.destination.name", target)
        sent = trace_headers(trace.set_span_in_context(span)) | dict(headers or {})
        nc = self._link.nc
        reply = await self._replies.open()
        inbox = reply.subject
        ended = False  # the server has sent its last message: a terminal one or an error
        try:
            await nc.publish(target, encode(body), reply=inbox, headers=sent)
            while True:
                try:
                    msg = await reply.next(timeout)
                except TimeoutError:
                    self._link.count_error(ErrorCode.TIMEOUT)
                    span.set_status(Status(StatusCode.ERROR, "timeout"))
                    raise BusTimeoutError(f"stream on {target} was silent for {timeout}s") from None
                if _no_responders(msg):
                    await self._retry_publish(target, body, inbox, sent)
                    continue
                try:
                    item = decode_reply(route.reply, bytes(msg.data))
                except TetherError:
                    ended = True  # an error reply is the server's last word
                    raise
                # Before the yield: a caller that stops at the terminal item is not gone.
                ended = is_terminal(item)
                yield item
                if ended:
                    return
        finally:
            span.end()
            self._replies.close(reply)
            if not ended:
                await self._caller_gone(route, inbox)

    async def _caller_gone(self, route: Route[Any, Any], inbox: str) -> None:
        """This caller stopped waiting for the request answered to `inbox`: a cancellable
        route's servers are told (`cancelling`); best effort, as a lost notice only lets
        the handler finish for nobody, as it would have without one."""
        if not route.cancellable:
            return
        notice = encode(CancelNotice(inbox=inbox))
        try:
            await self._link.nc.publish(self._subjects.cancel_notices(route.queue), notice)
        except Exception as exc:
            log.debug("no cancel notice for %s: %r", route.subject, exc)

    async def _retry_publish(
        self, target: str, body: BaseModel, inbox: str, headers: dict[str, str]
    ) -> None:
        """Re-send a streamed request that met "no responders", within the grace period."""
        attempts = headers.get("Tether-Attempt", "0")
        if int(attempts) >= NO_RESPONDERS_RETRIES:
            self._link.count_error(ErrorCode.NO_RESPONDERS)
            raise BusError(f"no service answers on {target}", code=ErrorCode.NO_RESPONDERS)
        headers["Tether-Attempt"] = str(int(attempts) + 1)
        await asyncio.sleep(delay_s(NO_RESPONDERS, int(attempts) + 1))
        await self._link.nc.publish(target, encode(body), reply=inbox, headers=headers)

    async def publish(self, subject: str, body: BaseModel) -> None:
        await self._link.nc.publish(subject, encode(body), headers=trace_headers())

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None:
        await self._link.nc.publish(subject, data, reply=reply)

    async def subscribe_raw(self, subject: str) -> Subscription:
        """A plain subscription (tests, live tails), at the server when this returns, so
        it hears what any connection publishes next; the caller unsubscribes."""
        sub = await self._link.nc.subscribe(subject)
        await settle(self._link.nc)
        return sub
