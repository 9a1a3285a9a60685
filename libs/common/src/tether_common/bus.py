"""Connect, request/reply, streamed replies, publish, queue-group serving with validation,
JetStream streams, and W3C trace context in headers. With objects.py (the object store),
the only module that imports nats.

A handler never crashes its receiver: a body that is not JSON, of the wrong shape or of an
unknown version gets an `ErrorReply` (code + message), is logged and counted; any other
failure in a handler becomes an `internal` error reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import suppress
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeVar

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api as js_api
from nats.js.errors import NotFoundError as JsNotFoundError
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel

from tether_common.errors import (
    BusError,
    BusTimeoutError,
    ConfigError,
    ErrorCode,
    MessageError,
    TetherError,
)
from tether_common.messages.base import ErrorReply, decode, decode_reply, encode
from tether_common.metrics import bus_errors
from tether_common.natsauth import inbox_prefix
from tether_common.subjects import Route, StreamSpec, Subjects

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)
T = TypeVar("T")

Handler = Callable[[Req], Awaitable[Rep]]
StreamHandler = Callable[[Req], AsyncIterator[Rep]]


DEFAULT_INBOX_PREFIX = "_INBOX"
SETTLE_TIMEOUT_S = 10  # each of `settle`'s two waits (nats-py's own flush default)
NO_RESPONDERS_GRACE_S = 2.0

# The headers of the message a `serve`/`serve_stream` handler is handling (each message
# runs in its own task, so this never leaks between messages); empty elsewhere.
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_message_headers: ContextVar[Mapping[str, str]] = ContextVar(
    "tether_message_headers", default=_NO_HEADERS
)


def message_headers() -> Mapping[str, str]:
    """The current request's NATS headers (e.g. the caller's `Authorization`)."""
    return _message_headers.get()


NO_RESPONDERS_RETRIES = 6

# Heartbeats on a long request (`request_watched`): the requester names an interval in
# this header; a `serve` handler that reads it sends an empty message carrying the same
# header to the reply inbox at once and then every interval while the handler runs, so
# the requester learns of a dead responder after a few missed beats instead of at its
# timeout. A responder that does not know the header sends none (the requester then
# waits for its whole timeout, as before): the header is the contract's version.
HEARTBEAT_HEADER = "Tether-Heartbeat"
HEARTBEAT_RANGE_S = (0.1, 60.0)


def _heartbeat_of(headers: Mapping[str, str]) -> float | None:
    """The interval a request asks for, clamped; None when it asks for none."""
    raw = headers.get(HEARTBEAT_HEADER)
    try:
        every = float(raw) if raw else None
    except ValueError:
        return None
    if every is None or every != every:  # absent, or NaN
        return None
    return min(max(every, HEARTBEAT_RANGE_S[0]), HEARTBEAT_RANGE_S[1])


async def settle(nc: NatsClient) -> None:
    """Return once the server has processed every command `nc` made before the call (a
    SUB, a PUB): the barrier `flush()` promises but, in nats-py, does not keep. Its PING is
    written straight to the socket while those commands still wait in the client's queue
    for its flusher task, so the PONG can come back before the server has seen them (a
    subscription then misses what another connection publishes next; the server's trace
    shows the SUB after the PING). So the queue is handed to the flusher and written
    first, and only then is the PING sent. Both waits are bounded: nats-py's forced flush
    would otherwise wait as long as a lost connection takes to come back.

    Cancellable at any point without harm, unlike `flush()`: nats-py resolves each PONG's
    future without looking, so one cancelled by a caller that went away (an SSE client
    closing while its subscription settles) raised in its reader, which died, and the
    client, still "connected", heard nothing more. The PONG's future here is shielded:
    a caller that stops waiting leaves it for the PONG to resolve."""
    with suppress(TimeoutError):
        await _kept_cancellable(nc._flush_pending(force_flush=True))
    reading = nc._reading_task
    if not nc.is_connected or reading is None or reading.done():
        return  # no reader to hear a PONG: the queue was written, which is all there is
    pong: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    await _kept_cancellable(nc._send_ping(pong))  # it ends in the same swallowing flush
    try:
        await _kept_cancellable(asyncio.shield(pong))
    except TimeoutError as exc:
        raise BusError(
            f"NATS did not answer a PING within {SETTLE_TIMEOUT_S} s",
            code=ErrorCode.UNREACHABLE,
        ) from exc


async def _kept_cancellable(step: Awaitable[T]) -> T:
    """One of `settle`'s waits, bounded by `SETTLE_TIMEOUT_S`, in a task of its own, with
    the caller's cancellation kept: nats-py's flush swallows one that reaches it, and
    Python 3.11's `wait_for` drops one that arrives as its task finishes. A caller that
    was asked to stop stops here (a pending request to cancel this task is raised)."""
    result = await asyncio.wait_for(step, SETTLE_TIMEOUT_S)
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise asyncio.CancelledError
    return result


def _no_responders(msg: Msg) -> bool:
    headers = msg.headers or {}
    return not msg.data and headers.get("Status") == "503"


def _trace_headers(context: Context | None = None) -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


class Bus:
    """A connected NATS client with Tether's conventions; an async context manager."""

    def __init__(self, subjects: Subjects, service: str) -> None:
        self.subjects = subjects
        self.service = service
        self._conn: NatsClient | None = None
        self._js: Any = None
        self._subs: list[Subscription] = []
        self._inbox = DEFAULT_INBOX_PREFIX
        self._inflight: set[asyncio.Task[None]] = set()

    @property
    def _nc(self) -> NatsClient:
        if self._conn is None:
            raise BusError(
                f"{self.service}: the bus is not connected yet", code=ErrorCode.NOT_CONNECTED
            )
        return self._conn

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        service: str,
        subjects: Subjects,
        user: str | None = None,
        password: str | None = None,
        connect_timeout: float = 5.0,
    ) -> Bus:
        bus = cls(subjects, service)
        await bus.open(url, user=user, password=password, connect_timeout=connect_timeout)
        return bus

    async def open(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        """Connect, reconnecting forever after a loss (NATS restarts are survivable)."""
        self._inbox = inbox_prefix(user) if user else DEFAULT_INBOX_PREFIX

        async def on_error(exc: Exception) -> None:
            log.warning("nats error: %s", exc)

        async def on_disconnect() -> None:
            if self._conn is not None and self._conn.is_closed:
                log.debug("nats connection closed")  # ours, on the way out: nothing lost
                return
            log.warning("nats disconnected")

        async def on_reconnect() -> None:
            log.info("nats reconnected")

        try:
            self._conn = await nats.connect(
                # A cluster is several URLs, comma-separated; the client also learns the
                # others from the server it reaches, but needs one of these to be up.
                servers=[part.strip() for part in url.split(",") if part.strip()],
                name=f"tether-{self.service}",
                user=user,
                password=password,
                # A user's replies arrive under its own prefix, the only inboxes the
                # locked-down bus lets it subscribe to (tether_common.natsauth).
                inbox_prefix=self._inbox,
                connect_timeout=connect_timeout,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                allow_reconnect=True,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            )
        except Exception as exc:
            raise BusError(f"cannot connect to NATS at {url}: {exc}") from exc
        self._js = self._conn.jetstream()

    async def settle(self) -> None:
        """Every command made before the call has reached the server (see `settle`)."""
        await settle(self._nc)

    @property
    def connected(self) -> bool:
        return self._conn is not None and bool(self._conn.is_connected)

    @property
    def jetstream(self) -> Any:
        """The JetStream context, for objects.py (the object store); others use methods here."""
        if self._js is None:
            return self._nc.jetstream()  # raises: not connected yet
        return self._js

    async def round_trip(self, timeout: float) -> None:
        """A JetStream API request answered within `timeout` (BusError otherwise): proof
        that the bus, and the stream store behind it, can be reached now. `connected`
        cannot give that: a silent partition leaves the client connected until its pings
        go unanswered, minutes later. (Not `flush(timeout)`: nats-py leaves the timed-out
        PONG's future behind, and the late PONG then stops the client's reader.)"""
        try:
            await asyncio.wait_for(
                self.jetstream.find_stream_name_by_subject(self.subjects.run_events_all), timeout
            )
        except JsNotFoundError:
            return  # answered: the stream is just not declared yet
        except BusError:
            raise
        except Exception as exc:
            await self._revive_reader()
            raise BusError(f"no round trip to NATS: {exc!r}", code=ErrorCode.UNREACHABLE) from exc

    async def _revive_reader(self) -> None:
        """A client whose reader task ended while it still counts as connected hears
        nothing until its pings go unanswered (minutes): nats-py's reader stops at the
        first error it does not expect (a PONG for a cancelled flush was one). Such a
        client is made to reconnect now, which starts a new reader."""
        nc = self._conn
        reading = None if nc is None else nc._reading_task
        if nc is None or not nc.is_connected or reading is None or not reading.done():
            return
        bus_errors.add(1, {"service": self.service, "code": ErrorCode.UNREACHABLE})
        log.error("%s: the NATS client's reader had stopped; reconnecting", self.service)
        await nc._process_op_err(nats.errors.UnexpectedEOF())

    @property
    def max_payload(self) -> int:
        return int(self._nc.max_payload)

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending -----------------------------------------------------------------

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
        deadline = time.monotonic() + min(timeout, NO_RESPONDERS_GRACE_S)
        delay = 0.02
        while True:
            try:
                msg = await self._nc.request(
                    subject, data, timeout=timeout, headers=_trace_headers() | dict(headers or {})
                )
                return bytes(msg.data)
            except NoRespondersError:
                if time.monotonic() + delay > deadline:
                    bus_errors.add(1, {"service": self.service, "code": ErrorCode.NO_RESPONDERS})
                    raise BusError(
                        f"no service answers on {subject}", code=ErrorCode.NO_RESPONDERS
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            except NatsTimeoutError:
                bus_errors.add(1, {"service": self.service, "code": ErrorCode.TIMEOUT})
                raise BusTimeoutError(f"no reply on {subject} within {timeout}s") from None

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
            sent = _trace_headers() | {HEARTBEAT_HEADER: f"{heartbeat_s:g}"}
            data = await self._watched(target, encode(body), sent, timeout, heartbeat_s * missed)
            return decode_reply(route.reply, data)

    async def _watched(
        self, target: str, data: bytes, headers: dict[str, str], timeout: float, silence: float
    ) -> bytes:
        now = time.monotonic()
        deadline, grace = now + timeout, now + min(timeout, NO_RESPONDERS_GRACE_S)
        delay, alive = 0.02, False
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        try:
            await self._nc.publish(target, data, reply=inbox, headers=headers)
            while True:
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise NatsTimeoutError
                    msg = await sub.next_msg(timeout=min(left, silence) if alive else left)
                except NatsTimeoutError:
                    bus_errors.add(1, {"service": self.service, "code": ErrorCode.TIMEOUT})
                    why = "heartbeats stopped" if alive and left > 0 else "no reply"
                    raise BusTimeoutError(f"{why} on {target} (limit {timeout}s)") from None
                if _no_responders(msg):
                    if time.monotonic() + delay > grace:
                        bus_errors.add(
                            1, {"service": self.service, "code": ErrorCode.NO_RESPONDERS}
                        )
                        raise BusError(
                            f"no service answers on {target}", code=ErrorCode.NO_RESPONDERS
                        )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    await self._nc.publish(target, data, reply=inbox, headers=headers)
                    continue
                if (msg.headers or {}).get(HEARTBEAT_HEADER) and not msg.data:
                    alive = True
                    continue
                return bytes(msg.data)
        finally:
            with suppress(Exception):
                await sub.unsubscribe()

    async def stream(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        is_terminal: Callable[[Rep], bool],
        timeout: float = 300.0,
        subject: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[Rep]:
        """A streamed reply: many messages to one inbox, ended by a terminal message.
        `timeout` bounds the wait for each message, not the whole stream."""
        target = subject or route.subject
        # Not made current: the context must not leak across this generator's yields.
        span = tracer.start_span(f"send {target}", kind=SpanKind.CLIENT)
        span.set_attribute("messaging.system", "nats")
        span.set_attribute("messaging.destination.name", target)
        sent = _trace_headers(trace.set_span_in_context(span)) | dict(headers or {})
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        try:
            await self._nc.publish(target, encode(body), reply=inbox, headers=sent)
            while True:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except NatsTimeoutError:
                    bus_errors.add(1, {"service": self.service, "code": ErrorCode.TIMEOUT})
                    span.set_status(Status(StatusCode.ERROR, "timeout"))
                    raise BusTimeoutError(f"stream on {target} was silent for {timeout}s") from None
                if _no_responders(msg):
                    await self._retry_publish(target, body, inbox, sent)
                    continue
                item = decode_reply(route.reply, bytes(msg.data))
                yield item
                if is_terminal(item):
                    return
        finally:
            span.end()
            with suppress(Exception):
                await sub.unsubscribe()

    async def _retry_publish(
        self, target: str, body: BaseModel, inbox: str, headers: dict[str, str]
    ) -> None:
        """Re-send a streamed request that met "no responders", within the grace period."""
        attempts = headers.get("Tether-Attempt", "0")
        if int(attempts) >= NO_RESPONDERS_RETRIES:
            bus_errors.add(1, {"service": self.service, "code": ErrorCode.NO_RESPONDERS})
            raise BusError(f"no service answers on {target}", code=ErrorCode.NO_RESPONDERS)
        headers["Tether-Attempt"] = str(int(attempts) + 1)
        await asyncio.sleep(0.02 * 2 ** int(attempts))
        await self._nc.publish(target, encode(body), reply=inbox, headers=headers)

    async def publish(self, subject: str, body: BaseModel) -> None:
        await self._nc.publish(subject, encode(body), headers=_trace_headers())

    async def js_publish(self, subject: str, body: BaseModel, *, msg_id: str | None = None) -> int:
        """Publish to a JetStream stream and wait for the ack; returns the stream sequence."""
        headers = _trace_headers()
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        try:
            ack = await self._nc.jetstream().publish(subject, encode(body), headers=headers)
        except Exception as exc:
            bus_errors.add(1, {"service": self.service, "code": "js_publish"})
            raise BusError(f"JetStream publish to {subject} failed: {exc}") from exc
        return int(ack.seq)

    async def js_publish_many(
        self, items: Sequence[tuple[str, bytes, str]], *, timeout: float = 10.0
    ) -> None:
        """Publish several messages already serialised, (subject, body, message id), to
        JetStream in order, pipelined: they leave in one write to the socket and their
        acks are awaited together. The message id makes a re-publish harmless (the stream
        deduplicates it)."""
        if not items:
            return
        traced = _trace_headers()  # one context for the whole batch
        try:
            acks = [
                await self._js.publish_async(
                    subject, body, headers=traced | {"Nats-Msg-Id": msg_id}
                )
                for subject, body, msg_id in items
            ]
            await asyncio.wait_for(asyncio.gather(*acks), timeout)
        except Exception as exc:
            bus_errors.add(1, {"service": self.service, "code": "js_publish"})
            raise BusError(f"JetStream publish failed: {exc}") from exc

    async def ensure_streams(self) -> None:
        """Declare every JetStream stream from `Subjects.streams` (idempotent)."""
        js = self._nc.jetstream()
        for spec in self.subjects.streams:
            await self._ensure_stream(js, spec)

    async def _ensure_stream(self, js: Any, spec: StreamSpec) -> None:
        config = js_api.StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            max_age=spec.max_age_s,
            storage=js_api.StorageType.FILE,
            duplicate_window=120.0,
            num_replicas=spec.replicas,
        )
        try:
            info = await js.stream_info(spec.name)
            # A service started with a lower replica count never shrinks the stream (one
            # left at the default would drop the cluster's copies): only raising it does.
            config.num_replicas = max(spec.replicas, info.config.num_replicas or 1)
            await js.update_stream(config)
        except JsNotFoundError:
            with suppress(Exception):  # a replica starting at the same time may win
                await js.add_stream(config)

    async def replay(self, subject: str, *, idle_s: float = 15.0) -> AsyncIterator[bytes | None]:
        """Every message stored on a JetStream subject from the start, then live ones;
        `None` after each `idle_s` of silence, so the caller can check and go on or stop."""
        sub = await self._nc.jetstream().subscribe(
            subject, ordered_consumer=True, deliver_policy=js_api.DeliverPolicy.ALL
        )
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_s)
                except NatsTimeoutError:
                    yield None
                    continue
                yield bytes(msg.data)
        finally:
            with suppress(Exception):
                await sub.unsubscribe()

    async def subscribe_raw(self, subject: str) -> Subscription:
        """A plain subscription (tests, live tails), at the server when this returns, so
        it hears what any connection publishes next; the caller unsubscribes."""
        sub = await self._nc.subscribe(subject)
        await settle(self._nc)
        return sub

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None:
        await self._nc.publish(subject, data, reply=reply)

    # ---- serving -----------------------------------------------------------------

    async def listen(
        self, subject: str, model: type[Req], handler: Callable[[Req], Awaitable[None]]
    ) -> None:
        """A broadcast: every listener gets every message (no queue group, no reply).
        A bad body is logged and counted, never raised."""

        async def run(msg: Msg) -> None:
            try:
                await handler(decode(model, bytes(msg.data)))
            except TetherError as exc:
                bus_errors.add(1, {"service": self.service, "code": exc.code})
                log.warning("ignored message on %s: %s", subject, exc.message)
            except Exception:
                bus_errors.add(1, {"service": self.service, "code": ErrorCode.INTERNAL})
                log.exception("listener for %s failed", subject)

        async def on_msg(msg: Msg) -> None:
            self._track(asyncio.create_task(run(msg)))

        self._subs.append(await self._nc.subscribe(subject, cb=on_msg))
        await settle(self._nc)

    async def consume(
        self,
        subject: str,
        *,
        durable: str,
        model: type[Req],
        handler: Callable[[Req], Awaitable[None]],
    ) -> None:
        """A durable JetStream consumer shared by the replicas (its name is also their
        queue group, as nats-py requires): each stored message is
        handled by one replica and acknowledged after the handler returns; a failed
        handler leaves it to be redelivered; a body that does not decode is terminated."""

        async def run(msg: Msg) -> None:
            try:
                body = decode(model, bytes(msg.data))
            except TetherError as exc:
                bus_errors.add(1, {"service": self.service, "code": exc.code})
                log.warning("dropped undecodable message on %s: %s", subject, exc.message)
                await msg.term()
                return
            try:
                # A server span in the publisher's trace, as for every handled message.
                with self._span(msg.subject, dict(msg.headers or {})):
                    await handler(body)
            except Exception:
                bus_errors.add(1, {"service": self.service, "code": ErrorCode.INTERNAL})
                log.exception("consumer of %s failed; the message will be redelivered", subject)
                await msg.nak(delay=1.0)
                return
            await msg.ack()

        async def on_msg(msg: Msg) -> None:
            self._track(asyncio.create_task(run(msg)))

        await self._drop_foreign_consumer(subject, durable)
        sub = await self._js.subscribe(
            subject, queue=durable, durable=durable, cb=on_msg, manual_ack=True
        )
        self._subs.append(sub)

    async def _drop_foreign_consumer(self, subject: str, durable: str) -> None:
        """A durable consumer made under another inbox prefix (before each user had its
        own) delivers where this user may not listen: delete it, so the subscription makes
        it again here. The stream keeps its messages; a redelivered one is handled as
        any replay is."""
        try:
            stream_name = await self._js.find_stream_name_by_subject(subject)
            info = await self._js.consumer_info(stream_name, durable)
        except Exception:  # no stream or no consumer yet: nothing to drop
            return
        deliver = info.config.deliver_subject
        if deliver and not deliver.startswith(self._inbox + "."):
            log.warning("re-creating consumer %s: it delivered to %s", durable, deliver)
            await self._js.delete_consumer(stream_name, durable)

    async def serve(self, route: Route[Req, Rep], handler: Handler[Req, Rep]) -> None:
        """Answer `route` in its queue group; each message is handled in its own task."""

        async def run(msg: Msg) -> None:
            headers = dict(msg.headers or {})
            _message_headers.set(MappingProxyType(headers))
            # Only a beating route beats: on any other, the one reply its server may send
            # (a locked bus allows one) must be the answer, whatever the request asks.
            every = _heartbeat_of(headers) if route.beats else None
            beats = self._heartbeat(msg.reply, every) if every is not None and msg.reply else None
            with self._span(msg.subject, headers) as span:
                try:
                    reply = await self._call(route, handler, msg, span)
                finally:
                    if beats is not None:
                        beats.stop()
                if msg.reply:
                    await self._nc.publish(msg.reply, reply)

        await self._subscribe(route.subject, route.queue, run)

    async def serve_stream(self, route: Route[Req, Rep], handler: StreamHandler[Req, Rep]) -> None:
        """Answer `route` with many messages to the requester's inbox."""

        async def run(msg: Msg) -> None:
            if not msg.reply:
                return
            headers = dict(msg.headers or {})
            _message_headers.set(MappingProxyType(headers))
            with self._span(msg.subject, headers) as span:
                try:
                    body = decode(route.request, bytes(msg.data))
                    async for item in handler(body):
                        await self._nc.publish(msg.reply, encode(item))
                except Exception as exc:  # every failure becomes a structured reply
                    await self._nc.publish(msg.reply, self._error_reply(route, exc, span))

        await self._subscribe(route.subject, route.queue, run)

    def _heartbeat(self, inbox: str, every: float) -> _Heartbeat:
        """Say "still working" to a requester that asked for heartbeats: as soon as the
        handler first waits, then every `every` seconds until the heartbeat is stopped."""
        beat = _Heartbeat(self._nc, inbox, every, self._track)
        beat.start()
        return beat

    def _track(self, task: asyncio.Task[None]) -> None:
        """Keep `task` until it ends; `stop_taking` waits for what is left."""
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _subscribe(
        self, subject: str, queue: str, run: Callable[[Msg], Coroutine[Any, Any, None]]
    ) -> None:
        async def on_msg(msg: Msg) -> None:
            self._track(asyncio.create_task(run(msg)))

        self._subs.append(await self._nc.subscribe(subject, queue=queue, cb=on_msg))
        await settle(self._nc)  # the server knows the subscription before we report ready

    def _span(self, subject: str, headers: dict[str, str]) -> Any:
        ctx = propagate.extract(headers)
        return tracer.start_as_current_span(f"process {subject}", context=ctx, kind=SpanKind.SERVER)

    async def _call(
        self, route: Route[Req, Rep], handler: Handler[Req, Rep], msg: Msg, span: Any
    ) -> bytes:
        started = time.perf_counter()
        try:
            body = decode(route.request, bytes(msg.data))
            result = await handler(body)
        except Exception as exc:
            return self._error_reply(route, exc, span)
        log.debug("handled %s in %.1f ms", route.subject, (time.perf_counter() - started) * 1000)
        return encode(result)

    def _error_reply(self, route: Route[Any, Any], exc: Exception, span: Any) -> bytes:
        if isinstance(exc, TetherError):
            err = exc
            level = logging.WARNING if isinstance(exc, MessageError) else logging.INFO
            log.log(level, "refused %s: %s (%s)", route.subject, err.message, err.code)
        else:
            err = TetherError(f"internal error handling {route.subject}: {type(exc).__name__}")
            log.exception("handler for %s failed", route.subject)
        bus_errors.add(1, {"service": self.service, "code": err.code})
        span.set_status(Status(StatusCode.ERROR, err.code))
        return encode(ErrorReply.of(err))

    # ---- shutdown ----------------------------------------------------------------

    async def stop_taking(self, timeout: float = 10.0) -> None:
        """Stop taking messages and finish in-flight handlers within `timeout` (then
        cancel them); the connection stays open for what stopping still sends. Each
        subscription is drained: the server stops sending, and what it had already sent
        is still handled, never dropped. Unacknowledged JetStream messages are
        redelivered to another replica."""
        subs, self._subs = self._subs, []
        # All at once, so no subscription keeps taking messages while another drains.
        await asyncio.gather(*(self._drain(sub, timeout) for sub in subs))
        if self._inflight:
            _done, pending = await asyncio.wait(set(self._inflight), timeout=timeout)
            for task in pending:
                task.cancel()

    async def _drain(self, sub: Subscription, timeout: float) -> None:
        with suppress(Exception):
            if self._conn is not None and self._conn.is_connected:
                await asyncio.wait_for(sub.drain(), timeout)  # type: ignore[no-untyped-call]
            else:  # draining needs the server; without it, just stop locally
                await sub.unsubscribe()

    async def close(self, timeout: float = 10.0) -> None:
        """Stop taking messages, finish in-flight handlers within `timeout`, then close."""
        await self.stop_taking(timeout)
        if self._conn is not None:
            with suppress(Exception):
                # Draining needs the server; with it gone it would wait on reconnects.
                if self._conn.is_connected:
                    await asyncio.wait_for(self._conn.drain(), timeout)
                else:
                    await self._conn.close()


class _Heartbeat:
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
