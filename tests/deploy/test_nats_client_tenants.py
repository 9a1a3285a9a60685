"""Per-tenant client users against a real locked-down nats-server: `client-a` calls the
brain's client routes and hears its replies, but cannot subscribe to any other client
user's inbox (another tenant's, the shared `client` user's, the global one), and hears
nothing of another tenant's request/reply; a tenant name that could bend the
configuration (subject tokens, wildcards, variable syntax, collisions) is refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from nats.aio.msg import Msg

from tether_client.server.natsauth import (
    TenantNameError,
    client_user,
    generate_passwords,
    main,
    render_config,
)
from tether_client.server.testing.locked_nats import (
    Conn,
    LockedNats,
    connected,
    locked_nats,
    request_until_served,
)
from tether_common.bus import settle
from tether_common.subjects import Subjects, inbox_prefix

PREFIX = f"t{uuid.uuid4().hex[:8]}"
SUBJECTS = Subjects(PREFIX)
TENANTS = ("a", "b")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedNats]:
    passwords = generate_passwords(TENANTS)
    text = render_config(SUBJECTS, passwords, tenants=TENANTS)
    with locked_nats(tmp_path_factory.mktemp("tenant-nats"), text, passwords) as server:
        yield server


@pytest.fixture
async def users(server: LockedNats) -> AsyncIterator[dict[str, Conn]]:
    async with connected(server, ["brain", "client", *map(client_user, TENANTS)]) as conns:
        yield conns


async def echo_brain(brain: Conn) -> None:
    """A stand-in brain answering `runs.get` with the request it got."""

    async def answer(msg: Msg) -> None:
        await msg.respond(b"reply to " + msg.data)

    route = SUBJECTS.run_get
    await brain.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(brain.nc)


async def test_a_tenant_client_calls_the_brain_and_hears_its_reply(
    users: dict[str, Conn],
) -> None:
    await echo_brain(users["brain"])
    for tenant in TENANTS:
        conn = users[client_user(tenant)]
        reply = await request_until_served(conn.nc, SUBJECTS.run_get.subject, tenant.encode())
        assert reply.data == b"reply to " + tenant.encode()
        assert not conn.errors


async def test_a_tenant_client_follows_a_run_through_a_streamed_reply(
    users: dict[str, Conn],
) -> None:
    brain, client = users["brain"], users[client_user("a")]
    route = SUBJECTS.run_follow

    async def answer(msg: Msg) -> None:
        for n in range(3):
            await msg.respond(str(n).encode())

    await brain.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(brain.nc)
    await request_until_served(client.nc, route.subject, b"{}")
    inbox = client.nc.new_inbox()
    assert inbox.startswith("_INBOX_client-a.")
    sub = await client.nc.subscribe(inbox)
    await client.nc.publish(route.subject, b"{}", reply=inbox)
    assert [(await sub.next_msg(timeout=5)).data for _ in range(3)] == [b"0", b"1", b"2"]
    assert not client.errors


FOREIGN_INBOXES = [
    "_INBOX_client-b.>",
    "_INBOX_client-b.*",
    "_INBOX_client-b.abc.*",
    "_INBOX_client.>",
    "_INBOX_client.*",
    "_INBOX.>",
    "_INBOX.*",
    "*.>",
    ">",
    "*.*.>",
    "_INBOX_brain.>",
]


@pytest.mark.parametrize("pattern", FOREIGN_INBOXES)
async def test_a_tenant_client_cannot_subscribe_to_another_inbox(
    users: dict[str, Conn], pattern: str
) -> None:
    conn = users[client_user("a")]
    await conn.nc.subscribe(pattern)
    error = await conn.refused()
    assert "permissions violation for subscription" in error.lower()
    assert pattern.lower() in error.lower()


async def test_a_tenant_client_hears_nothing_of_another_tenants_replies(
    server: LockedNats, users: dict[str, Conn]
) -> None:
    """`client-b` and `client` call the brain; `client-a` listens with every pattern it
    might (each refused) and also on its own inbox space, and hears nothing of theirs."""
    await echo_brain(users["brain"])
    spy = users[client_user("a")]
    heard: list[bytes] = []

    async def overheard(msg: Msg) -> None:
        heard.append(msg.data)

    for pattern in FOREIGN_INBOXES:
        await spy.nc.subscribe(pattern, cb=overheard)
        assert "permissions violation" in (await spy.refused()).lower(), pattern
    await spy.nc.subscribe(f"{inbox_prefix(client_user('a'))}.>", cb=overheard)
    await settle(spy.nc)
    for victim in (client_user("b"), "client"):
        for n in range(5):
            secret = f"{victim}-secret-{n}".encode()
            reply = await request_until_served(users[victim].nc, SUBJECTS.run_get.subject, secret)
            assert reply.data == b"reply to " + secret
    await settle(spy.nc)
    assert heard == []


BAD_TENANTS = [
    "a.b",  # a subject token: tenant `a` would read `_INBOX_client-a.b.>`
    "a:b",
    "a@b",
    "*",
    ">",
    "a b",
    "a\nb",
    'a"b',
    "a}b",
    "$X",
    "-a",
    "",
    "a" * 64,
    "é",
]


@pytest.mark.parametrize("tenant", BAD_TENANTS)
def test_a_bad_tenant_name_is_refused(tenant: str) -> None:
    with pytest.raises(TenantNameError):
        client_user(tenant)
    with pytest.raises(TenantNameError):
        render_config(SUBJECTS, generate_passwords(()), tenants=[tenant])


@pytest.mark.parametrize("tenants", ["a-b,a_b", "a,A", "a,a", "ok,a.b", "ok,x y"])
def test_the_command_line_refuses_bad_or_colliding_tenants(
    tenants: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--env-passwords", "--client-tenants", tenants])
    assert exit_.value.code == 2
    assert capsys.readouterr().out == ""


def test_the_command_line_adds_one_user_per_tenant_reading_its_own_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--env-passwords", "--client-tenants", "a,team_2"]) == 0
    out = capsys.readouterr().out
    for user, env in (("client-a", "CLIENT_A"), ("client-team_2", "CLIENT_TEAM_2")):
        assert f'user: "{user}"' in out
        assert f"password: $NATS_PASSWORD_{env}\n" in out
        assert f'"_INBOX_{user}.>"' in out
    assert 'user: "client"' in out
