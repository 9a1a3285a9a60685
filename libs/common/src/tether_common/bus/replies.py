"""`Replies`: the answers to this connection's streamed and watched requests and to its
pipelined JetStream publishes, all on one wildcard subscription of the connection's own
inbox (`<inbox>.<nuid>.*`), each request told apart by the last token of its reply
subject, as nats-py does for a plain request.

Written here rather than taken from nats-py (issue 33, measured in the brain's profile at
50 runs in flight, where these are every step's messages): a subscription per request
costs a SUB and an UNSUB at the server and a `Subscription` each time;
`Subscription.next_msg` makes two tasks and a uuid4 for every message it waits for; and
`JetStream.publish_async` a task for every message (its semaphore is taken through
`wait_for`). Together about 7 % of the brain's CPU a step. Here a request costs a dict
entry, and a wait a timer. A request's token is random (its reply subject cannot be
guessed from another's), and the answers it holds unread are bounded (`BACKLOG`)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tether_common.bus.link import Link
from tether_common.errors import BusError, ErrorCode

__all__ = ["BACKLOG", "Replies", "Reply"]

log = logging.getLogger(__name__)


# Answers one request may have waiting unread: a responder that floods its reply
# subject (it may send many there: a stream) ends that request, not the caller's memory.
BACKLOG = 10_000


@dataclass(slots=True)
class Reply:
    """One request's answers, in the order they came; `subject` is its reply subject."""

    subject: str
    token: str
    queue: asyncio.Queue[Msg] = field(default_factory=lambda: asyncio.Queue(BACKLOG))
    flooded: bool = False  # more answers came than `BACKLOG` unread: the rest were dropped

    async def next(self, timeout: float) -> Msg:
        """The next answer; `TimeoutError` after `timeout` seconds of silence, `BusError`
        once answers were dropped for coming faster than they were read."""
        if self.flooded:
            raise BusError(
                f"more than {BACKLOG} answers unread on {self.subject}: answers were dropped",
                code=ErrorCode.INVALID_MESSAGE,
            )
        async with asyncio.timeout(timeout):
            return await self.queue.get()


class Replies:
    """The wildcard subscription (made on first use) and the requests waiting on it."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._prefix = ""
        self._sub: Subscription | None = None
        self._made = asyncio.Lock()
        self._waiting: dict[str, Reply] = {}

    async def open(self) -> Reply:
        """A new reply subject whose answers go to the returned `Reply`; `close` it."""
        if self._sub is None:
            await self._subscribe()
        # Unguessable, as nats-py's are: the prefix travels in every request's reply
        # subject, and on a bus that is not locked down anyone may publish anywhere.
        token = secrets.token_hex(8)
        while token in self._waiting:
            token = secrets.token_hex(8)
        reply = Reply(self._prefix + token, token)
        self._waiting[token] = reply
        return reply

    def close(self, reply: Reply) -> None:
        """No more answers are wanted: a late one is dropped on arrival."""
        self._waiting.pop(reply.token, None)

    async def _subscribe(self) -> None:
        async with self._made:
            if self._sub is not None:
                return
            nc = self._link.nc
            prefix = f"{nc.new_inbox()}."
            self._sub = await nc.subscribe(prefix + "*", cb=self._on_msg)
            self._prefix = prefix

    async def _on_msg(self, msg: Msg) -> None:
        reply = self._waiting.get(msg.subject[len(self._prefix) :])
        if reply is None or reply.flooded:
            return
        try:
            reply.queue.put_nowait(msg)
        except asyncio.QueueFull:
            reply.flooded = True
            self._link.count_error(ErrorCode.INVALID_MESSAGE)
            log.warning("more than %d answers unread on %s: dropped", BACKLOG, msg.subject)
