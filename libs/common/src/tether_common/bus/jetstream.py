"""`JetStream`: the bus's durable side. Streams declared from `Subjects.streams`,
acknowledged publishes (one, or a pipelined batch), replay from the start, durable
consumers shared by a service's replicas, and a round trip that proves the stream
store can be reached now."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import api as js_api
from nats.js import errors as js_errors
from nats.js.errors import NotFoundError as JsNotFoundError
from pydantic import BaseModel

from tether_common.bus.link import Link, trace_headers
from tether_common.bus.replies import Replies, Reply
from tether_common.bus.serving import Serving
from tether_common.errors import BusError, ErrorCode, TetherError
from tether_common.messages.base import decode, encode
from tether_common.subjects import StreamSpec, Subjects

log = logging.getLogger(__name__)

Req = TypeVar("Req", bound=BaseModel)

DUPLICATE_WINDOW_S = 120.0  # a re-published message id within this is dropped by the stream


class JetStream:
    """Streams, acknowledged publishes, replay and durable consumers over one `Link`;
    consumers' subscriptions and tasks are kept by `serving`, so stopping drains them."""

    def __init__(self, link: Link, subjects: Subjects, serving: Serving, replies: Replies) -> None:
        self._link, self._subjects, self._serving = link, subjects, serving
        self._replies = replies

    @property
    def context(self) -> Any:
        """The JetStream context, for the output-store's object store."""
        if self._link.js is None:
            return self._link.nc.jetstream()  # raises: not connected yet
        return self._link.js

    async def round_trip(self, timeout: float) -> None:
        """A JetStream API request answered within `timeout` (BusError otherwise): proof
        that the bus, and the stream store behind it, can be reached now. `connected`
        cannot give that: a silent partition leaves the client connected until its pings
        go unanswered, minutes later. (Not `flush(timeout)`: nats-py leaves the timed-out
        PONG's future behind, and the late PONG then stops the client's reader.)"""
        try:
            await asyncio.wait_for(
                self.context.find_stream_name_by_subject(self._subjects.run_events_all), timeout
            )
        except JsNotFoundError:
            return  # answered: the stream is just not declared yet
        except BusError:
            raise
        except Exception as exc:
            await self._link.revive_reader()
            raise BusError(f"no round trip to NATS: {exc!r}", code=ErrorCode.UNREACHABLE) from exc

    async def publish(self, subject: str, body: BaseModel, *, msg_id: str | None = None) -> int:
        """Publish to a JetStream stream and wait for the ack; returns the stream sequence."""
        headers = trace_headers()
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        try:
            ack = await self._link.nc.jetstream().publish(subject, encode(body), headers=headers)
        except Exception as exc:
            self._link.count_error("js_publish")
            raise BusError(f"JetStream publish to {subject} failed: {exc}") from exc
        return int(ack.seq)

    async def publish_many(
        self, items: Sequence[tuple[str, bytes, str]], *, timeout: float = 10.0
    ) -> None:
        """Publish several messages already serialised, (subject, body, message id), to
        JetStream in order, pipelined: they leave in one write to the socket and their
        acks are awaited together. The message id makes a re-publish harmless (the stream
        deduplicates it)."""
        await (await self.send_many(items)).confirmed(timeout)

    async def send_many(self, items: Sequence[tuple[str, bytes, str]]) -> Acks:
        """`publish_many`'s sending half: the messages are on their way when it returns;
        their acks are awaited later (`Acks.confirmed`), or given up (`Acks.abandon`)."""
        acks = Acks(self._link, self._replies)
        if not items:
            return acks
        traced = trace_headers()  # one context for the whole batch
        nc = self._link.nc
        try:
            for subject, body, msg_id in items:
                reply = await self._replies.open()
                acks.waiting.append(reply)
                await nc.publish(
                    subject, body, reply=reply.subject, headers=traced | {"Nats-Msg-Id": msg_id}
                )
        except Exception as exc:
            acks.abandon()
            self._link.count_error("js_publish")
            raise BusError(f"JetStream publish failed: {exc!r}") from exc
        return acks

    async def ensure_streams(self) -> None:
        """Declare every JetStream stream from `Subjects.streams` (idempotent)."""
        js = self._link.nc.jetstream()
        for spec in self._subjects.streams:
            await self._ensure_stream(js, spec)

    async def _ensure_stream(self, js: Any, spec: StreamSpec) -> None:
        config = js_api.StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            max_age=spec.max_age_s,
            storage=js_api.StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S,
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
        sub = await self._link.nc.jetstream().subscribe(
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

    async def consume(
        self,
        subject: str,
        *,
        durable: str,
        model: type[Req],
        handler: Callable[[Req], Awaitable[None]],
        new_only: bool = False,
        takes_over: str | None = None,
    ) -> None:
        """A durable JetStream consumer shared by the replicas (its name is also their
        queue group, as nats-py requires): each stored message is
        handled by one replica and acknowledged after the handler returns; a failed
        handler leaves it to be redelivered; a body that does not decode is terminated.
        `new_only`: a consumer made now starts at the stream's next message, not its
        first (an existing one goes on from where it was acknowledged either way).
        `takes_over`: the durable this one replaces on the same stream; made now, this
        one starts after the last message that one had acknowledged, and that one is
        deleted."""

        async def run(msg: Msg) -> None:
            try:
                body = decode(model, bytes(msg.data))
            except TetherError as exc:
                self._link.count_error(exc.code)
                log.warning("dropped undecodable message on %s: %s", subject, exc.message)
                await msg.term()
                return
            try:
                # A server span in the publisher's trace, as for every handled message.
                with self._serving.span(msg.subject, dict(msg.headers or {})):
                    await handler(body)
            except Exception:
                self._link.count_error(ErrorCode.INTERNAL)
                log.exception("consumer of %s failed; the message will be redelivered", subject)
                await msg.nak(delay=1.0)
                return
            await msg.ack()

        async def on_msg(msg: Msg) -> None:
            self._serving.track(asyncio.create_task(run(msg)))

        await self._drop_foreign_consumer(subject, durable)
        start = js_api.DeliverPolicy.NEW if new_only else None
        after = await self._acknowledged_by(subject, takes_over, durable)
        sub = await self._link.js.subscribe(
            subject,
            queue=durable,
            durable=durable,
            cb=on_msg,
            manual_ack=True,
            deliver_policy=start if after is None else js_api.DeliverPolicy.BY_START_SEQUENCE,
            config=None if after is None else js_api.ConsumerConfig(opt_start_seq=after + 1),
        )
        self._serving.keep(sub)
        if after is not None and takes_over is not None:
            await self._delete_consumer(subject, takes_over)

    async def _acknowledged_by(self, subject: str, former: str | None, durable: str) -> int | None:
        """The stream sequence up to which `former` had acknowledged, when `durable` is
        yet to be made (None: nothing to take over)."""
        if former is None:
            return None
        js = self._link.js
        try:
            stream_name = await js.find_stream_name_by_subject(subject)
        except Exception:  # no stream yet: nothing to take over
            return None
        try:
            await js.consumer_info(stream_name, durable)
            return None  # already made (by another replica, or before)
        except JsNotFoundError:
            pass
        try:
            info = await js.consumer_info(stream_name, former)
        except JsNotFoundError:
            return None
        acknowledged = info.ack_floor.stream_seq if info.ack_floor else 0
        log.info("consumer %s takes over from %s after message %d", durable, former, acknowledged)
        return int(acknowledged)

    async def _delete_consumer(self, subject: str, durable: str) -> None:
        js = self._link.js
        with suppress(JsNotFoundError):
            await js.delete_consumer(await js.find_stream_name_by_subject(subject), durable)

    async def _drop_foreign_consumer(self, subject: str, durable: str) -> None:
        """A durable consumer made under another inbox prefix (before each user had its
        own) delivers where this user may not listen: delete it, so the subscription makes
        it again here. The stream keeps its messages; a redelivered one is handled as
        any replay is."""
        js = self._link.js
        try:
            stream_name = await js.find_stream_name_by_subject(subject)
            info = await js.consumer_info(stream_name, durable)
        except Exception:  # no stream or no consumer yet: nothing to drop
            return
        deliver = info.config.deliver_subject
        if deliver and not deliver.startswith(self._link.inbox + "."):
            log.warning("re-creating consumer %s: it delivered to %s", durable, deliver)
            await js.delete_consumer(stream_name, durable)


def _acknowledged(msg: Msg) -> None:
    """Raise unless `msg` is a stream's acknowledgement of a publish (nats-py's
    `publish_async` reads its replies the same way)."""
    if not msg.data and (msg.headers or {}).get("Status") == "503":
        raise BusError("no stream takes this subject", code=ErrorCode.NO_RESPONDERS)
    answer = json.loads(msg.data)
    if "error" in answer:
        raise js_errors.APIError.from_error(answer["error"])


@dataclass(slots=True)
class Acks:
    """The acks of messages sent to JetStream, read when the sender is ready for them."""

    link: Link
    replies: Replies
    waiting: list[Reply] = field(default_factory=list)

    async def confirmed(self, timeout: float = 10.0) -> None:
        """Every message was stored (or was a duplicate): else `BusError`."""
        try:
            async with asyncio.timeout(timeout):
                for reply in self.waiting:
                    _acknowledged(await reply.queue.get())
        except BusError:  # said by the stream's answer: raised as it is, its code kept
            self.link.count_error("js_publish")
            raise
        except Exception as exc:
            self.link.count_error("js_publish")
            raise BusError(f"JetStream publish failed: {exc!r}") from exc
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Their acks are no longer wanted (a late one is dropped on arrival)."""
        for reply in self.waiting:
            self.replies.close(reply)
        self.waiting = []
