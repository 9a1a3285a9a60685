"""`Serving`: the answering side of the bus. Queue-group handlers for routes (one reply,
or a streamed one), broadcast listeners, the tasks they run in, and stopping them.

A handler never crashes its receiver: a body that is not JSON, of the wrong shape or of an
unknown version gets an `ErrorReply` (code + message), is logged and counted; any other
failure in a handler becomes an `internal` error reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import suppress
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, TypeVar

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel

from tether_common.bus.cancelling import Cancellations
from tether_common.bus.heartbeat import Heartbeat, heartbeat_of
from tether_common.bus.link import Link
from tether_common.bus.settle import settle
from tether_common.errors import ErrorCode, MessageError, TetherError
from tether_common.messages.base import ErrorReply, decode, encode
from tether_common.subjects import Route, Subjects

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)

Handler = Callable[[Req], Awaitable[Rep]]
StreamHandler = Callable[[Req], AsyncIterator[Rep]]

# The headers of the message a `serve`/`serve_stream` handler is handling (each message
# runs in its own task, so this never leaks between messages); empty elsewhere.
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_message_headers: ContextVar[Mapping[str, str]] = ContextVar(
    "tether_message_headers", default=_NO_HEADERS
)


def message_headers() -> Mapping[str, str]:
    """The current request's NATS headers (e.g. the caller's `Authorization`)."""
    return _message_headers.get()


class Serving:
    """The subscriptions a service answers on and the handler tasks in flight."""

    def __init__(self, link: Link, subjects: Subjects) -> None:
        self._link = link
        self._subs: list[Subscription] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._cancels = Cancellations(link, subjects)

    async def listen(
        self, subject: str, model: type[Req], handler: Callable[[Req], Awaitable[None]]
    ) -> None:
        """A broadcast: every listener gets every message (no queue group, no reply).
        A bad body is logged and counted, never raised."""

        async def run(msg: Msg) -> None:
            try:
                await handler(decode(model, bytes(msg.data)))
            except TetherError as exc:
                self._link.count_error(exc.code)
                log.warning("ignored message on %s: %s", subject, exc.message)
            except Exception:
                self._link.count_error(ErrorCode.INTERNAL)
                log.exception("listener for %s failed", subject)

        await self._subscribe(subject, "", run)  # no queue group: every listener hears it

    async def serve(self, route: Route[Req, Rep], handler: Handler[Req, Rep]) -> None:
        """Answer `route` in its queue group; each message is handled in its own task."""

        async def run(msg: Msg) -> None:
            headers = dict(msg.headers or {})
            _message_headers.set(MappingProxyType(headers))
            # Only a beating route beats: on any other, the one reply its server may send
            # (a locked bus allows one) must be the answer, whatever the request asks.
            every = heartbeat_of(headers) if route.beats else None
            beats = self._heartbeat(msg.reply, every) if every is not None and msg.reply else None
            with self.span(msg.subject, headers) as span:
                try:
                    reply = await self._call(route, handler, msg, span)
                finally:
                    if beats is not None:
                        beats.stop()
                if msg.reply:
                    await self._link.nc.publish(msg.reply, reply)

        await self._subscribe(route.subject, route.queue, run, route)

    async def serve_stream(self, route: Route[Req, Rep], handler: StreamHandler[Req, Rep]) -> None:
        """Answer `route` with many messages to the requester's inbox."""

        async def run(msg: Msg) -> None:
            if not msg.reply:
                return
            headers = dict(msg.headers or {})
            _message_headers.set(MappingProxyType(headers))
            with self.span(msg.subject, headers) as span:
                try:
                    body = decode(route.request, bytes(msg.data))
                    async for item in handler(body):
                        await self._link.nc.publish(msg.reply, encode(item))
                except Exception as exc:  # every failure becomes a structured reply
                    await self._link.nc.publish(msg.reply, self._error_reply(route, exc, span))

        await self._subscribe(route.subject, route.queue, run, route)

    def _heartbeat(self, inbox: str, every: float) -> Heartbeat:
        """Say "still working" to a requester that asked for heartbeats: as soon as the
        handler first waits, then every `every` seconds until the heartbeat is stopped."""
        beat = Heartbeat(self._link.nc, inbox, every, self.track)
        beat.start()
        return beat

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep `task` until it ends; `stop_taking` waits for what is left."""
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    def keep(self, sub: Subscription) -> None:
        """A subscription `stop_taking` drains (JetStream consumers add theirs here)."""
        self._subs.append(sub)

    async def _subscribe(
        self,
        subject: str,
        queue: str,
        run: Callable[[Msg], Coroutine[Any, Any, None]],
        route: Route[Any, Any] | None = None,
    ) -> None:
        """Each message in a task of its own; a cancellable route's tasks are held by
        their reply inbox, for the caller's notice to cancel (`cancelling`)."""
        cancellable = route is not None and route.cancellable
        if cancellable:
            await self._cancels.listen(queue)

        async def on_msg(msg: Msg) -> None:
            if cancellable and msg.reply and self._cancels.gone(msg.reply):
                self._cancels.dropped(subject)
                return
            task = asyncio.create_task(run(msg))
            self.track(task)
            if cancellable and msg.reply:
                self._cancels.hold(msg.reply, task, subject)

        self.keep(await self._link.nc.subscribe(subject, queue=queue, cb=on_msg))
        await settle(self._link.nc)  # the server knows the subscription before we report ready

    def span(self, subject: str, headers: dict[str, str]) -> Any:
        """A server span for one handled message, in the publisher's trace."""
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
        self._link.count_error(err.code)
        span.set_status(Status(StatusCode.ERROR, err.code))
        return encode(ErrorReply.of(err))

    async def stop_taking(self, timeout: float) -> None:
        """Stop taking messages and finish in-flight handlers within `timeout` (then
        cancel them); the connection stays open for what stopping still sends. Each
        subscription is drained: the server stops sending, and what it had already sent
        is still handled, never dropped. Unacknowledged JetStream messages are
        redelivered to another replica. Cancel notices are heard to the end: a handler
        whose caller goes away meanwhile (a brain stopping first) is cancelled at once
        instead of being waited for."""
        subs, self._subs = self._subs, []
        # All at once, so no subscription keeps taking messages while another drains.
        await asyncio.gather(*(self._drain(sub, timeout) for sub in subs))
        if self._inflight:
            _done, pending = await asyncio.wait(set(self._inflight), timeout=timeout)
            for task in pending:
                task.cancel()
        await self._cancels.stop()

    async def _drain(self, sub: Subscription, timeout: float) -> None:
        with suppress(Exception):
            if self._link.connected:
                await asyncio.wait_for(sub.drain(), timeout)  # type: ignore[no-untyped-call]
            else:  # draining needs the server; without it, just stop locally
                await sub.unsubscribe()
