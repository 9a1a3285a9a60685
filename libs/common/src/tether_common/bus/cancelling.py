"""`Cancellations`: the serving side of a caller gone. For each cancellable route
(`Route.cancellable`) the serving process keeps the reply inbox of every request in
flight and the task handling it; a `CancelNotice` naming that inbox, on the one
subscription per queue group (`Subjects.cancel_notices`), cancels the task at once.

Nothing is added per request on the wire: no subscription, no message, unless a caller
does go away (then its one notice). Every replica hears every notice; the one holding
the inbox cancels, the others remember it briefly, in case the notice overtook its
request (a cluster may route the two differently): such a request is dropped on arrival.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from tether_common.bus.link import Link
from tether_common.bus.settle import settle
from tether_common.errors import TetherError
from tether_common.messages.base import decode
from tether_common.messages.cancel import CancelNotice
from tether_common.metrics import bus_cancelled
from tether_common.subjects import Subjects

log = logging.getLogger(__name__)

# Inboxes of notices that found no handler here (another replica's request, one already
# answered, or one whose request has not arrived yet): the newest are kept, so a request
# overtaken by its notice is still dropped; an inbox is never used twice.
GONE_KEPT = 1024


class Cancellations:
    """Inbox → handler task for the cancellable requests in flight, and the notice
    subscriptions that cancel them."""

    def __init__(self, link: Link, subjects: Subjects) -> None:
        self._link = link
        self._subjects = subjects
        self._held: dict[str, tuple[asyncio.Task[None], str]] = {}  # inbox → task, subject
        self._gone: dict[str, None] = {}  # insertion-ordered: the oldest is evicted first
        self._subs: dict[str, Subscription] = {}  # notice subject → its subscription

    async def listen(self, queue: str) -> None:
        """Hear the notices of `queue`'s callers (once per queue group and process)."""
        subject = self._subjects.cancel_notices(queue)
        if subject in self._subs:
            return
        self._subs[subject] = await self._link.nc.subscribe(subject, cb=self._on_notice)
        await settle(self._link.nc)

    def hold(self, inbox: str, task: asyncio.Task[None], subject: str) -> None:
        """`task` answers the request whose replies go to `inbox` until it ends."""
        self._held[inbox] = (task, subject)
        task.add_done_callback(lambda done: self._release(inbox, done))

    def gone(self, inbox: str) -> bool:
        """Whether the caller of a request just arrived has already said it went away."""
        if inbox not in self._gone:
            return False
        del self._gone[inbox]
        return True

    def _release(self, inbox: str, task: asyncio.Task[None]) -> None:
        if (held := self._held.get(inbox)) is not None and held[0] is task:
            del self._held[inbox]

    async def _on_notice(self, msg: Msg) -> None:
        try:
            notice = decode(CancelNotice, bytes(msg.data))
        except TetherError as exc:
            self._link.count_error(exc.code)
            log.warning("ignored cancel notice on %s: %s", msg.subject, exc.message)
            return
        self.cancel(notice.inbox)

    def cancel(self, inbox: str) -> bool:
        """Cancel the handler answering `inbox`, if one is here; whether one was."""
        held = self._held.pop(inbox, None)
        if held is None or held[0].done():
            self._remember(inbox)
            return False
        task, subject = held
        task.cancel()
        bus_cancelled.add(1, {"service": self._link.service})
        log.info("cancelled a handler of %s: its caller went away", subject)
        return True

    def dropped(self, subject: str) -> None:
        """A request whose caller had gone before it arrived was not handled."""
        bus_cancelled.add(1, {"service": self._link.service})
        log.info("dropped a request on %s: its caller had already gone away", subject)

    def _remember(self, inbox: str) -> None:
        self._gone[inbox] = None
        if len(self._gone) > GONE_KEPT:
            del self._gone[next(iter(self._gone))]

    async def stop(self) -> None:
        """Stop hearing notices (after the handlers they could cancel have ended)."""
        subs, self._subs = list(self._subs.values()), {}
        for sub in subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection may already be gone: nothing to hear
                log.debug("cancel notices: unsubscribe failed: %r", exc)
