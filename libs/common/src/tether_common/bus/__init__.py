"""The bus: Tether's one way onto NATS, and with the output-store's object store the only
code that imports nats.

`Bus` is a thin facade over four pieces sharing one connection (`link.Link`):

- `requests.Requests`: request/reply, watched requests (heartbeats), streamed replies,
  publishes;
- `serving.Serving`: queue-group handlers with validation, broadcast listeners, their
  tasks, draining them on the way out;
- `jetstream.JetStream`: streams, acknowledged publishes, replay, durable consumers;
- `replies.Replies`: one subscription for the answers to streamed and watched requests
  and pipelined JetStream publishes;
- `settle.settle`: the barrier every new subscription waits on;
- `cancelling.Cancellations`: a cancellable route's handler stops when its caller goes
  away (the caller's side is in `requests`).

W3C trace context travels in the headers of every message. A handler never crashes its
receiver: a bad body gets an `ErrorReply` (code + message), is logged and counted.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription
from pydantic import BaseModel

from tether_common.bus.heartbeat import HEARTBEAT_HEADER
from tether_common.bus.jetstream import Acks, JetStream
from tether_common.bus.link import Link
from tether_common.bus.replies import Replies
from tether_common.bus.requests import Requests
from tether_common.bus.serving import Handler, Serving, StreamHandler, message_headers
from tether_common.bus.settle import settle
from tether_common.subjects import Route, Subjects

__all__ = ["HEARTBEAT_HEADER", "Acks", "Bus", "message_headers", "settle"]

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)


class Bus:
    """A connected NATS client with Tether's conventions; an async context manager.
    Each method hands over to the piece that owns it (see the package docstring)."""

    def __init__(self, subjects: Subjects, service: str) -> None:
        self.subjects = subjects
        self.service = service
        self._link = Link(service)
        replies = Replies(self._link)
        self._requests = Requests(self._link, subjects, replies)
        self._serving = Serving(self._link, subjects)
        self._jetstream = JetStream(self._link, subjects, self._serving, replies)

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
        await self._link.open(url, user=user, password=password, connect_timeout=connect_timeout)

    @property
    def _nc(self) -> NatsClient:
        """The nats-py client (tests reach under the facade with it)."""
        return self._link.nc

    @property
    def connected(self) -> bool:
        return self._link.connected

    @property
    def max_payload(self) -> int:
        return int(self._link.nc.max_payload)

    async def settle(self) -> None:
        """Every command made before the call has reached the server (see `settle`)."""
        await settle(self._link.nc)

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- requests (requests.py) --------------------------------------------------

    async def request(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        timeout: float = 10.0,
        subject: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Rep:
        """Send a command and decode its reply; an error reply raises the matching error."""
        return await self._requests.request(
            route, body, timeout=timeout, subject=subject, headers=headers
        )

    async def request_raw(
        self,
        subject: str,
        data: bytes,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        return await self._requests.request_raw(subject, data, timeout=timeout, headers=headers)

    async def request_watched(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        timeout: float,
        heartbeat_s: float,
        missed: int = 3,
    ) -> Rep:
        """A request whose responder beats while it works (`Requests.request_watched`)."""
        return await self._requests.request_watched(
            route, body, timeout=timeout, heartbeat_s=heartbeat_s, missed=missed
        )

    def stream(
        self,
        route: Route[Req, Rep],
        body: Req,
        *,
        is_terminal: Callable[[Rep], bool],
        timeout: float = 300.0,
        subject: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Rep, None]:
        """A streamed reply, ended by a terminal message (`Requests.stream`)."""
        return self._requests.stream(
            route, body, is_terminal=is_terminal, timeout=timeout, subject=subject, headers=headers
        )

    async def publish(self, subject: str, body: BaseModel) -> None:
        await self._requests.publish(subject, body)

    async def publish_raw(self, subject: str, data: bytes, reply: str = "") -> None:
        await self._requests.publish_raw(subject, data, reply)

    async def subscribe_raw(self, subject: str) -> Subscription:
        """A plain subscription, at the server when this returns; the caller unsubscribes."""
        return await self._requests.subscribe_raw(subject)

    # ---- serving (serving.py) ----------------------------------------------------

    async def serve(self, route: Route[Req, Rep], handler: Handler[Req, Rep]) -> None:
        """Answer `route` in its queue group; each message is handled in its own task."""
        await self._serving.serve(route, handler)

    async def serve_stream(self, route: Route[Req, Rep], handler: StreamHandler[Req, Rep]) -> None:
        """Answer `route` with many messages to the requester's inbox."""
        await self._serving.serve_stream(route, handler)

    async def listen(
        self, subject: str, model: type[Req], handler: Callable[[Req], Awaitable[None]]
    ) -> None:
        """A broadcast: every listener gets every message; a bad body is logged, counted."""
        await self._serving.listen(subject, model, handler)

    async def stop_taking(self, timeout: float = 10.0) -> None:
        """Stop taking messages and finish in-flight handlers within `timeout` (then
        cancel them); the connection stays open for what stopping still sends."""
        await self._serving.stop_taking(timeout)

    async def close(self, timeout: float = 10.0) -> None:
        """Stop taking messages, finish in-flight handlers within `timeout`, then close."""
        await self.stop_taking(timeout)
        await self._link.close(timeout)

    # ---- JetStream (jetstream.py) ------------------------------------------------

    @property
    def jetstream(self) -> Any:
        """The JetStream context, for the output-store's object store; others use methods here."""
        return self._jetstream.context

    async def round_trip(self, timeout: float) -> None:
        """Proof that the bus and its stream store answer now (`JetStream.round_trip`)."""
        await self._jetstream.round_trip(timeout)

    async def js_publish(self, subject: str, body: BaseModel, *, msg_id: str | None = None) -> int:
        """Publish to a JetStream stream and wait for the ack; returns the stream sequence."""
        return await self._jetstream.publish(subject, body, msg_id=msg_id)

    async def js_publish_many(
        self, items: Sequence[tuple[str, bytes, str]], *, timeout: float = 10.0
    ) -> None:
        """Publish (subject, body, message id) items in order, pipelined."""
        await self._jetstream.publish_many(items, timeout=timeout)

    async def js_send_many(self, items: Sequence[tuple[str, bytes, str]]) -> Acks:
        """`js_publish_many` without waiting: its acks are read later (`Acks`)."""
        return await self._jetstream.send_many(items)

    async def ensure_streams(self) -> None:
        """Declare every JetStream stream from `Subjects.streams` (idempotent)."""
        await self._jetstream.ensure_streams()

    def replay(self, subject: str, *, idle_s: float = 15.0) -> AsyncIterator[bytes | None]:
        """Every stored message on `subject`, then live ones; `None` after each silence."""
        return self._jetstream.replay(subject, idle_s=idle_s)

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
        """A durable JetStream consumer shared by the replicas (`JetStream.consume`)."""
        await self._jetstream.consume(
            subject,
            durable=durable,
            model=model,
            handler=handler,
            new_only=new_only,
            takes_over=takes_over,
        )
