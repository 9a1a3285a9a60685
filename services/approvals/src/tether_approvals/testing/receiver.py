"""A webhook receiver shipped for tests (like the harness in `testing`): a real HTTP
server on a free loopback port that checks each delivery's signature with the secret it
was given (as a real receiver must), answers 503 while it is "down", and lets a test
wait for the deliveries it expects."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tether_approvals.notices.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, verify

__all__ = ["Delivery", "Receiver", "closed_port", "receiver"]


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def delivery_id(self) -> str:
        return self.headers[DELIVERY_HEADER.lower()]

    @property
    def event(self) -> str:
        return self.headers[EVENT_HEADER.lower()]

    @property
    def signature(self) -> str:
        return self.headers.get(SIGNATURE_HEADER.lower(), "")

    def describe(self) -> str:
        """One line saying which notice this was (for a failing test's message)."""
        try:
            body = self.json
        except ValueError:
            return f"{len(self.body)} bytes that are not JSON, answered {self.answered}"
        card = _card(body)
        fields = ("approval_id", "run_id", "tenant", "tool", "status", "created_at")
        shown = " ".join(f"{name}={card.get(name)}" for name in fields)
        return (
            f"{self.headers.get(EVENT_HEADER.lower())} {self.headers.get(DELIVERY_HEADER.lower())}"
            f" answered={self.answered} verified={self.verified} {shown}"
        )


def _card(body: Any) -> dict[str, Any]:
    """An approval notice's card, or a run notice's run (`messages.webhooks.RunNotice`)."""
    if not isinstance(body, dict):
        return {}
    card = body.get("card", body.get("run"))
    return card if isinstance(card, dict) else {}


@dataclass
class Receiver:
    """`secret` may be set after the endpoint is registered (the server shows it once)."""

    port: int
    secret: str = ""
    down: bool = False
    failures_left: int = 0  # answer 503 to this many more deliveries, then accept
    # While stalled, a delivery is recorded on arrival (answered 0) and held unanswered.
    stalled: bool = False
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[Delivery] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        ok = verify(self.secret, body, headers.get(SIGNATURE_HEADER.lower()))
        if self.stalled:
            await self._record(Delivery(headers, body, ok, 0))
            await self._release.wait()
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        status = 204 if ok else 401
        if self.down or self.failures_left > 0:
            self.failures_left = max(0, self.failures_left - 1)
            status = 503
        await self._record(Delivery(headers, body, ok, status))
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def _record(self, delivery: Delivery) -> None:
        async with self._changed:
            self.seen.append(delivery)
            self._changed.notify_all()

    def release(self) -> None:
        """Stop stalling; held deliveries are answered 503 (their sender is gone)."""
        self.stalled = False
        self._release.set()

    async def wait_for(
        self, check: Callable[[list[Delivery]], bool], timeout: float = 20.0
    ) -> list[Delivery]:
        """Everything received so far, once `check` holds (else an AssertionError that
        lists what did come)."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: check(self.seen))
                return list(self.seen)
        except TimeoutError:
            raise AssertionError(f"waited {timeout:.0f}s; {self.described()}") from None

    async def first(self, approval_id: str, event: str, timeout: float = 20.0) -> Delivery:
        """The first delivery of `approval_id`'s `event` notice, once it has come (more may
        follow: re-sends after a failed answer). The endpoint also hears its tenant's other
        requests (others may be decided or expire at any time), so a test waits for its
        own."""
        await self.wait_for(lambda _: bool(self.of(approval_id, event)), timeout)
        return self.of(approval_id, event)[0]

    async def one(self, approval_id: str, event: str, timeout: float = 20.0) -> Delivery:
        """The delivery of `approval_id`'s `event` notice, as `first`; a second delivery of
        it already there is an error naming everything received."""
        await self.first(approval_id, event, timeout)
        mine = self.of(approval_id, event)
        if len(mine) != 1:
            raise AssertionError(
                f"{len(mine)} deliveries of {event} {approval_id}; {self.described()}"
            )
        return mine[0]

    def described(self) -> str:
        """What this receiver was sent, a line each."""
        lines = [f"  {d.describe()}" for d in self.seen]
        return "\n".join([f"the receiver got {len(self.seen)} deliveries:", *lines])

    def of(self, approval_id: str, event: str | None = None) -> list[Delivery]:
        return [
            d
            for d in self.seen
            if _card(d.json).get("approval_id") == approval_id and event in (None, d.event)
        ]

    def of_run(self, run_id: str, event: str | None = None) -> list[Delivery]:
        """The run notices about `run_id` (of kind `event`)."""
        return [
            d
            for d in self.seen
            if "run" in d.json
            and _card(d.json).get("run_id") == run_id
            and event in (None, d.event)
        ]


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before uvicorn starts: a delivery that comes early waits in the backlog.
    sock.listen(128)
    found = Receiver(sock.getsockname()[1])
    config = uvicorn.Config(found.app, log_level="warning", lifespan="off", interface="asgi3")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield found
    finally:
        found.release()
        server.should_exit = True
        await task
        sock.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
