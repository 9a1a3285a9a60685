"""A real nats-server started from a generated permissions config, and raw connections
that record what the server refuses: the set-up the bus-permission tests share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from tether_client.server.embedded import NatsServer
from tether_client.server.natsauth import write_config
from tether_common.bus import settle
from tether_common.subjects import inbox_prefix


@dataclass
class LockedNats:
    """A running locked-down server and the password of each of its users."""

    url: str
    passwords: dict[str, str]


@dataclass
class Conn:
    """A raw connection that records every error the server reports."""

    nc: Client
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def refused(self, timeout: float = 5.0) -> str:
        """The next error the server reports after the pending operations reach it."""
        await settle(self.nc)
        await asyncio.wait_for(self.changed.wait(), timeout)
        self.changed.clear()
        return self.errors[-1]


@contextmanager
def locked_nats(base: Path, config_text: str, passwords: dict[str, str]) -> Iterator[LockedNats]:
    config = write_config(base / "nats.conf", config_text)
    server = NatsServer(base / "data", config_file=config).start()
    try:
        yield LockedNats(server.url, passwords)
    finally:
        server.stop()


async def connect(server: LockedNats, user: str) -> Conn:
    conn: Conn | None = None

    async def on_error(exc: Exception) -> None:
        assert conn is not None
        conn.errors.append(str(exc))
        conn.changed.set()

    nc = await nats.connect(
        server.url,
        user=user,
        password=server.passwords[user],
        error_cb=on_error,
        inbox_prefix=inbox_prefix(user),
    )
    conn = Conn(nc)
    return conn


@asynccontextmanager
async def connected(server: LockedNats, users: list[str]) -> AsyncIterator[dict[str, Conn]]:
    conns = {user: await connect(server, user) for user in users}
    try:
        yield conns
    finally:
        for conn in conns.values():
            await conn.nc.close()


async def request_until_served(nc: Client, subject: str, data: bytes) -> Msg:
    """A request that rides out the moment in which a fresh queue subscription is not yet
    seen by the server's no-responders check (the same grace `Bus.request_raw` gives)."""
    for _attempt in range(40):
        try:
            return await nc.request(subject, data, timeout=5)
        except NoRespondersError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"nobody answers on {subject}")
