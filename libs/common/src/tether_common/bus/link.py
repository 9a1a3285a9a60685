"""`Link`: one service's NATS connection (connect, reconnect forever, revive a dead
reader, close) and the trace headers every message it sends carries. The bus's other
pieces (requests, serving, JetStream) all send and listen through one `Link`."""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from opentelemetry import propagate
from opentelemetry.context import Context

from tether_common.errors import BusError, ErrorCode
from tether_common.metrics import bus_errors
from tether_common.subjects import inbox_prefix

log = logging.getLogger(__name__)

DEFAULT_INBOX_PREFIX = "_INBOX"


def trace_headers(context: Context | None = None) -> dict[str, str]:
    """W3C trace context of the current span (or `context`), as NATS headers."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


class Link:
    """A service's connection to NATS, made by `open`; `nc` raises until then."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.conn: NatsClient | None = None
        self.js: Any = None  # the JetStream context, made once the connection is open
        self.inbox = DEFAULT_INBOX_PREFIX

    @property
    def nc(self) -> NatsClient:
        if self.conn is None:
            raise BusError(
                f"{self.service}: the bus is not connected yet", code=ErrorCode.NOT_CONNECTED
            )
        return self.conn

    @property
    def connected(self) -> bool:
        return self.conn is not None and bool(self.conn.is_connected)

    def count_error(self, code: str) -> None:
        """One bus error of this service, by code (`tether_bus_errors`)."""
        bus_errors.add(1, {"service": self.service, "code": code})

    async def open(
        self, url: str, *, user: str | None, password: str | None, connect_timeout: float
    ) -> None:
        """Connect, reconnecting forever after a loss (NATS restarts are survivable)."""
        self.inbox = inbox_prefix(user) if user else DEFAULT_INBOX_PREFIX
        try:
            self.conn = await nats.connect(
                # A cluster is several URLs, comma-separated; the client also learns the
                # others from the server it reaches, but needs one of these to be up.
                servers=[part.strip() for part in url.split(",") if part.strip()],
                name=f"tether-{self.service}",
                user=user,
                password=password,
                # A user's replies arrive under its own prefix, the only inboxes the
                # locked-down bus lets it subscribe to (`tether_common.subjects.inbox_prefix`).
                inbox_prefix=self.inbox,
                connect_timeout=connect_timeout,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.25,
                allow_reconnect=True,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnect,
                reconnected_cb=self._on_reconnect,
            )
        except Exception as exc:
            raise BusError(f"cannot connect to NATS at {url}: {exc}") from exc
        self.js = self.conn.jetstream()

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error: %s", exc)

    async def _on_disconnect(self) -> None:
        if self.conn is not None and self.conn.is_closed:
            log.debug("nats connection closed")  # ours, on the way out: nothing lost
            return
        log.warning("nats disconnected")

    async def _on_reconnect(self) -> None:
        log.info("nats reconnected")

    async def revive_reader(self) -> None:
        """A client whose reader task ended while it still counts as connected hears
        nothing until its pings go unanswered (minutes): nats-py's reader stops at the
        first error it does not expect (a PONG for a cancelled flush was one). Such a
        client is made to reconnect now, which starts a new reader."""
        nc = self.conn
        reading = None if nc is None else nc._reading_task
        if nc is None or not nc.is_connected or reading is None or not reading.done():
            return
        self.count_error(ErrorCode.UNREACHABLE)
        log.error("%s: the NATS client's reader had stopped; reconnecting", self.service)
        await nc._process_op_err(nats.errors.UnexpectedEOF())

    async def close(self, timeout: float) -> None:
        """Drain and close the connection (just close it when the server is gone)."""
        if self.conn is None:
            return
        with suppress(Exception):
            # Draining needs the server; with it gone it would wait on reconnects.
            if self.conn.is_connected:
                await asyncio.wait_for(self.conn.drain(), timeout)
            else:
                await self.conn.close()
