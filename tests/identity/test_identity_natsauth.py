"""`identity.verify` on a locked-down bus (the generated permissions, a real nats-server):
the services without the identity tables may ask; only the services with them may
answer (a service that could answer could mint admins); the client user may do neither."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import nats
import pytest
from nats.aio.client import Client

from tether_client.server.embedded import NatsServer
from tether_client.server.natsauth import generate_passwords, render_config, write_config
from tether_common.bus import Bus, settle
from tether_common.errors import AuthError
from tether_common.identity import Principal, RemoteVerifier, TokenCache, serve_verify
from tether_common.subjects import Subjects, inbox_prefix

SUBJECTS = Subjects(f"p{uuid.uuid4().hex[:8]}")
VERIFY = SUBJECTS.identity_verify.subject


class OneToken:
    """A `Verifier` that knows one token (the tables are not the point here)."""

    async def authenticate(self, token: str | None) -> Principal:
        if token != "tth_known":
            raise AuthError("the bearer token is not valid", code="unauthenticated")
        return Principal("alice", "client", "t-a", token_id="tok_1")


@dataclass
class Locked:
    url: str
    passwords: dict[str, str]


@dataclass
class Watched:
    nc: Client
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def refused(self) -> str:
        await settle(self.nc)
        await asyncio.wait_for(self.changed.wait(), 5)
        return self.errors[-1].lower()


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Locked]:
    base = tmp_path_factory.mktemp("identity-nats")
    passwords = generate_passwords()
    config = write_config(base / "nats.conf", render_config(SUBJECTS, passwords))
    server = NatsServer(base / "data", config_file=config).start()
    try:
        yield Locked(server.url, passwords)
    finally:
        server.stop()


async def as_service(locked: Locked, user: str) -> Bus:
    return await Bus.connect(
        locked.url, service=user, subjects=SUBJECTS, user=user, password=locked.passwords[user]
    )


@pytest.fixture
async def watched(locked: Locked) -> AsyncIterator[dict[str, Watched]]:
    conns: dict[str, Watched] = {}
    for user in ("client", "gateway", "tools-runner", "output-store"):
        holder: list[Watched] = []

        async def on_error(exc: Exception, holder: list[Watched] = holder) -> None:
            holder[0].errors.append(str(exc))
            holder[0].changed.set()

        nc = await nats.connect(
            locked.url,
            user=user,
            password=locked.passwords[user],
            error_cb=on_error,
            inbox_prefix=inbox_prefix(user),
        )
        holder.append(Watched(nc))
        conns[user] = holder[0]
    try:
        yield conns
    finally:
        for conn in conns.values():
            await conn.nc.close()


@pytest.mark.parametrize("server", ["brain", "approvals"])
@pytest.mark.parametrize("caller", ["gateway", "tools-runner"])
async def test_services_without_tables_ask_those_with_them(
    locked: Locked, server: str, caller: str
) -> None:
    answering, asking = await as_service(locked, server), await as_service(locked, caller)
    try:
        await serve_verify(answering, OneToken())
        remote = RemoteVerifier(asking, cache=TokenCache(ttl_s=0))
        assert (await remote.authenticate("tth_known")).name == "alice"
        with pytest.raises(AuthError) as refused:
            await remote.authenticate("tth_unknown")
        assert refused.value.code == "unauthenticated"
    finally:
        await asking.close()
        await answering.close()


@pytest.mark.parametrize("user", ["client", "output-store"])
async def test_others_may_not_ask(watched: dict[str, Watched], user: str) -> None:
    conn = watched[user]
    await conn.nc.publish(VERIFY, b'{"token": "tth_guess"}')
    error = await conn.refused()
    assert "permissions violation for publish" in error
    assert VERIFY.lower() in error


@pytest.mark.parametrize(
    ("user", "queue"),
    [
        ("client", ""),
        ("client", "identity"),
        ("gateway", "identity"),
        ("gateway", ""),
        ("tools-runner", "identity"),
        ("output-store", "identity"),
    ],
)
async def test_only_the_table_holders_may_answer(
    watched: dict[str, Watched], user: str, queue: str
) -> None:
    """A user that could subscribe could answer `admin` to any token, or read tokens."""
    conn = watched[user]
    await conn.nc.subscribe(VERIFY, queue=queue)
    error = await conn.refused()
    assert "permissions violation for subscription" in error
    assert VERIFY.lower() in error
