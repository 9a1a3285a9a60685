"""The generated bus permissions against a real nats-server: every forbidden publish or
subscribe is refused (nats-py reports the server's permissions violation to the error
callback), no user reads another's replies, the client's account is bounded, and the
conversations the services need still work."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from tether_client.server.natsauth import (
    CLIENT_LIMITS,
    ROLES,
    USERS,
    generate_passwords,
    main,
    queue_subjects,
    render_config,
    server_config,
    write_config,
)
from tether_client.server.testing.locked_nats import (
    Conn,
    LockedNats,
    connect,
    connected,
    locked_nats,
    request_until_served,
)
from tether_common.bus import Bus, settle
from tether_common.messages.runs import StopRun
from tether_common.subjects import QUEUE_BRAIN, Subjects, inbox_prefix
from tether_output_store.objects import BlobBucket

PREFIX = "pdeployauth"  # fixed: test ids name it
SUBJECTS = Subjects(PREFIX)


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedNats]:
    passwords = generate_passwords()
    text = render_config(SUBJECTS, passwords)
    with locked_nats(tmp_path_factory.mktemp("locked-nats"), text, passwords) as server:
        yield server


async def service_bus(locked: LockedNats, user: str) -> Bus:
    """A `Bus` logged in as `user` with its generated password."""
    return await Bus.connect(
        locked.url,
        service=user,
        subjects=SUBJECTS,
        user=user,
        password=locked.passwords[user],
    )


@pytest.fixture
async def users(locked: LockedNats) -> AsyncIterator[dict[str, Conn]]:
    async with connected(locked, list(locked.passwords)) as conns:
        yield conns


FORBIDDEN_PUBLISH = [
    ("tools-runner", SUBJECTS.approval_decided),
    ("tools-runner", SUBJECTS.run_events("r1")),
    ("tools-runner", SUBJECTS.run_stopping),
    ("tools-runner", SUBJECTS.approval_decide.subject),
    ("tools-runner", "_INBOX.someone-elses-reply"),
    ("tools-runner", f"$JS.API.STREAM.PURGE.{SUBJECTS.streams[0].name}"),
    ("gateway", SUBJECTS.tool_execute.subject),
    ("gateway", SUBJECTS.tool_catalog.subject),
    ("gateway", SUBJECTS.run_events("r1")),
    ("approvals", SUBJECTS.run_events("r1")),
    ("approvals", SUBJECTS.tool_execute.subject),
    ("output-store", SUBJECTS.run_start.subject),
    ("tools-runner", f"$O.{SUBJECTS.output_bucket}.C.smuggled"),
    ("brain", f"$JS.API.STREAM.PURGE.OBJ_{SUBJECTS.output_bucket}"),
    ("client", SUBJECTS.tool_execute.subject),
    ("client", SUBJECTS.approval_decided),
    ("client", SUBJECTS.approval_decide.subject),
    ("client", SUBJECTS.generate("rules").subject),
    ("client", SUBJECTS.run_events("r1")),
    ("client", f"$JS.API.STREAM.DELETE.{SUBJECTS.streams[0].name}"),
]

FORBIDDEN_SUBSCRIBE = [
    ("gateway", SUBJECTS.tool_execute.subject, "tools-runner"),
    ("gateway", SUBJECTS.run_events_all, ""),
    ("tools-runner", SUBJECTS.run_events_all, ""),
    ("tools-runner", SUBJECTS.approval_decided, ""),
    ("tools-runner", SUBJECTS.tool_execute.subject, ""),  # only inside its queue group
    ("client", SUBJECTS.tool_execute.subject, ""),
    ("client", SUBJECTS.run_start.subject, "brain"),
    ("client", SUBJECTS.approval_decided, ""),
    ("output-store", f"{PREFIX}.>", ""),
    ("client", "$JS.API.>", ""),
    # Run events reach a client only as replies of `runs.follow`, never by subscription.
    ("client", SUBJECTS.run_events_all, ""),
    ("client", SUBJECTS.run_events("r1"), ""),
    ("client", f"{PREFIX}.events.*", ""),
    ("client", f"{PREFIX}.*.r1", ""),
    ("client", f"{PREFIX}.>", ""),
    ("client", f"{PREFIX}.events.>", "brain"),
]
# Every user tries the shared inbox space, wildcards over it, and every other user's own.
OTHERS_INBOXES = [
    (user, pattern, "")
    for user in USERS
    for pattern in (
        "_INBOX.>",
        "_INBOX.*",
        "_INBOX.*.*",
        "*.>",
        ">",
        *(f"{inbox_prefix(other)}.>" for other in USERS if other != user),
        *(f"{inbox_prefix(other)}.abc.*" for other in USERS if other != user),
    )
]


@pytest.mark.parametrize(("user", "subject"), FORBIDDEN_PUBLISH)
async def test_forbidden_publish_is_refused(
    users: dict[str, Conn], user: str, subject: str
) -> None:
    conn = users[user]
    await conn.nc.publish(subject, b"{}")
    error = await conn.refused()
    assert "permissions violation for publish" in error.lower()
    assert subject.lower() in error.lower()


@pytest.mark.parametrize(("user", "subject", "queue"), FORBIDDEN_SUBSCRIBE + OTHERS_INBOXES)
async def test_forbidden_subscribe_is_refused(
    users: dict[str, Conn], user: str, subject: str, queue: str
) -> None:
    conn = users[user]
    await conn.nc.subscribe(subject, queue=queue)
    error = await conn.refused()
    assert "permissions violation for subscription" in error.lower()
    assert subject.lower() in error.lower()


@pytest.mark.parametrize(("user", "password"), [(None, None), ("brain", "wrong")])
async def test_a_stranger_or_a_wrong_password_cannot_connect(
    locked: LockedNats, user: str | None, password: str | None
) -> None:
    nc = Client()
    try:
        with pytest.raises(NatsError, match=r"(?i)authorization"):
            await nc.connect(
                locked.url, user=user, password=password, allow_reconnect=False, connect_timeout=2
            )
    finally:
        await nc.close()  # a refused connect leaves its socket to the caller


async def test_a_request_and_its_reply_cross_between_two_service_users(
    users: dict[str, Conn],
) -> None:
    runner, brain = users["tools-runner"], users["brain"]
    route = SUBJECTS.tool_execute

    async def answer(msg: Msg) -> None:
        await msg.respond(b'{"ok": true}')

    await runner.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(runner.nc)
    reply = await request_until_served(brain.nc, route.subject, b"{}")
    assert reply.data == b'{"ok": true}'
    assert not runner.errors
    assert not brain.errors


async def test_the_gateway_streams_many_replies_to_one_request(users: dict[str, Conn]) -> None:
    gateway, brain = users["gateway"], users["brain"]
    route = SUBJECTS.generate("rules")

    async def answer(msg: Msg) -> None:
        for n in range(5):
            await msg.respond(str(n).encode())

    await gateway.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(gateway.nc)
    await request_until_served(brain.nc, route.subject, b"{}")
    inbox = brain.nc.new_inbox()
    sub = await brain.nc.subscribe(inbox)
    await brain.nc.publish(route.subject, b"{}", reply=inbox)
    got = [(await sub.next_msg(timeout=5)).data for _ in range(5)]
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    assert not gateway.errors


async def test_the_client_hears_no_run_events_published_on_the_bus(
    locked: LockedNats, users: dict[str, Conn]
) -> None:
    """Events published to the stream do not cross into the client's account: each way
    of subscribing is refused and nothing arrives on any of them."""
    brain = await service_bus(locked, "brain")
    client = users["client"]
    heard: list[bytes] = []

    async def overheard(msg: Msg) -> None:
        heard.append(msg.data)

    try:
        await brain.ensure_streams()
        for pattern in (SUBJECTS.run_events("run-1"), SUBJECTS.run_events_all, ">"):
            await client.nc.subscribe(pattern, cb=overheard)
            refusal = await client.refused()
            assert "permissions violation for subscription" in refusal.lower(), pattern
            client.changed.clear()
        await brain.js_publish(
            SUBJECTS.run_events("run-1"), StopRun(run_id="run-1"), msg_id="run-1:1"
        )
        await settle(client.nc)
        assert heard == []
    finally:
        await brain.close()


async def test_the_client_follows_a_run_through_a_streamed_reply(users: dict[str, Conn]) -> None:
    """`runs.follow` crosses accounts as a service with streamed responses: many replies
    to one request reach the client's inbox."""
    brain, client = users["brain"], users["client"]
    route = SUBJECTS.run_follow

    async def answer(msg: Msg) -> None:
        for n in range(5):
            await msg.respond(str(n).encode())

    await brain.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(brain.nc)
    await request_until_served(client.nc, route.subject, b"{}")
    inbox = client.nc.new_inbox()
    sub = await client.nc.subscribe(inbox)
    await client.nc.publish(route.subject, b"{}", reply=inbox)
    got = [(await sub.next_msg(timeout=5)).data for _ in range(5)]
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    assert not brain.errors
    assert not client.errors


async def test_the_client_calls_the_brain_across_accounts(users: dict[str, Conn]) -> None:
    brain, client = users["brain"], users["client"]
    route = SUBJECTS.run_get

    async def answer(msg: Msg) -> None:
        await msg.respond(b'{"ok": true}')

    await brain.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(brain.nc)
    reply = await request_until_served(client.nc, route.subject, b"{}")
    assert reply.data == b'{"ok": true}'
    assert not brain.errors
    assert not client.errors


async def test_no_user_reads_a_reply_to_another_users_request(
    locked: LockedNats, users: dict[str, Conn]
) -> None:
    """A tool result travels from the runner to the brain's inbox: every other user tries
    to listen in, with every pattern it might, and hears nothing."""
    runner, brain = users["tools-runner"], users["brain"]
    route = SUBJECTS.tool_execute
    secret = b'{"content": "the tool result of another run"}'

    async def answer(msg: Msg) -> None:
        await msg.respond(secret)

    await runner.nc.subscribe(route.subject, queue=route.queue, cb=answer)
    await settle(runner.nc)
    eavesdroppers = {u: await connect(locked, u) for u in USERS if u != "brain"}
    heard: list[bytes] = []

    async def overheard(msg: Msg) -> None:
        heard.append(msg.data)

    try:
        for user, conn in eavesdroppers.items():
            for pattern in (">", "_INBOX.>", "_INBOX_brain.>", "_INBOX_brain.*.*", "*.>"):
                await conn.nc.subscribe(pattern, cb=overheard)
            refusal = await conn.refused()
            assert "permissions violation for subscription" in refusal.lower(), user
        for _ in range(5):
            reply = await request_until_served(brain.nc, route.subject, b"{}")
            assert reply.data == secret
        for conn in eavesdroppers.values():
            await settle(conn.nc)
        assert heard == []
    finally:
        for conn in eavesdroppers.values():
            await conn.nc.close()


async def test_the_client_creates_no_jetstream_consumers(
    locked: LockedNats, users: dict[str, Conn]
) -> None:
    """Its account has no JetStream: neither a durable nor an ephemeral consumer on any
    stream, whatever API subject it tries."""
    declaring = await service_bus(locked, "brain")
    try:
        await declaring.ensure_streams()
    finally:
        await declaring.close()
    client = users["client"]
    js = client.nc.jetstream(timeout=2)
    for spec in SUBJECTS.streams:
        for attempt in (
            js.add_consumer(spec.name, durable_name="mine"),
            js.add_consumer(spec.name),
            js.subscribe(spec.subjects[0], durable="mine"),
            js.subscribe(spec.subjects[0], ordered_consumer=True),
        ):
            with pytest.raises(NatsError):
                await attempt
    assert any("permissions violation" in e.lower() for e in client.errors)


async def test_the_client_account_hits_its_connection_limit_with_a_clear_error(
    locked: LockedNats,
) -> None:
    held: list[Client] = []
    try:
        while len(held) < CLIENT_LIMITS["max_connections"]:
            held.append(
                await nats.connect(
                    locked.url,
                    user="client",
                    password=locked.passwords["client"],
                    inbox_prefix=inbox_prefix("client"),
                    allow_reconnect=False,
                )
            )
        refused = Client()
        try:
            with pytest.raises(NatsError, match=r"(?i)maximum (account active )?connections"):
                await refused.connect(
                    locked.url,
                    user="client",
                    password=locked.passwords["client"],
                    allow_reconnect=False,
                    connect_timeout=2,
                )
        finally:
            await refused.close()
        # Tether's own users are not held back by the client's account.
        brain = await connect(locked, "brain")
        assert brain.nc.is_connected
        await brain.nc.close()
    finally:
        for nc in held:
            await nc.close()


async def test_the_client_account_hits_its_subscription_limit_with_a_clear_error(
    locked: LockedNats,
) -> None:
    """The server closes a connection that goes over the account's subscriptions, saying
    why; Tether's own users are not held back."""
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    nc = await nats.connect(
        locked.url,
        user="client",
        password=locked.passwords["client"],
        inbox_prefix=inbox_prefix("client"),
        allow_reconnect=False,
        closed_cb=on_closed,
    )
    try:
        for n in range(CLIENT_LIMITS["max_subscriptions"] + 1):
            if nc.is_closed:
                break
            await nc.subscribe(f"{inbox_prefix('client')}.s{n}")
        await asyncio.wait_for(closed.wait(), 10)
        assert "maximum subscriptions exceeded" in str(nc.last_error).lower()
    finally:
        await nc.close()
    brain = await connect(locked, "brain")
    try:
        for n in range(CLIENT_LIMITS["max_subscriptions"] + 1):
            await brain.nc.subscribe(f"{inbox_prefix('brain')}.s{n}")
        await settle(brain.nc)
        assert brain.nc.is_connected
    finally:
        await brain.nc.close()


async def test_brain_consumes_approval_decisions_that_approvals_publishes(
    locked: LockedNats, users: dict[str, Conn]
) -> None:
    approvals, brain = users["approvals"], users["brain"]
    declaring = await service_bus(locked, "approvals")
    try:
        await declaring.ensure_streams()
    finally:
        await declaring.close()
    ack = await approvals.nc.jetstream().publish(SUBJECTS.approval_decided, b"{}")
    got: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await brain.nc.jetstream().subscribe(
        SUBJECTS.approval_decided, durable="brain", queue="brain", cb=got.put, manual_ack=True
    )
    msg = await asyncio.wait_for(got.get(), 5)
    await msg.ack()
    await sub.unsubscribe()
    assert msg.metadata.sequence.stream == ack.seq
    assert not brain.errors
    assert not approvals.errors


async def test_every_service_may_declare_the_streams(locked: LockedNats) -> None:
    for user in ("gateway", "tools-runner", "approvals", "output-store"):
        bus = await service_bus(locked, user)
        try:
            await bus.ensure_streams()  # raises when the server refuses
            assert bus.connected
        finally:
            await bus.close()


async def test_the_output_store_owns_its_object_bucket(locked: LockedNats) -> None:
    """The JetStream backend's whole life on the locked bus: create the bucket, write,
    look up, read, list, delete, sweep; a permissions violation would raise here."""
    bus = await service_bus(locked, "output-store")
    try:
        bucket = BlobBucket(bus, SUBJECTS.output_bucket, create=True)
        await bucket.put("a" * 64, b"chunk bytes")
        assert await bucket.exists("a" * 64)
        assert await bucket.get("a" * 64) == b"chunk bytes"
        assert [b.name for b in await bucket.list()] == ["a" * 64]
        assert await bucket.sweep_unnamed() == 0
        assert await bucket.delete(["a" * 64, "b" * 64]) == 1
        assert not await bucket.exists("a" * 64)
    finally:
        await bus.close()


def test_the_config_file_is_private(tmp_path: Path) -> None:
    path = write_config(tmp_path / "n.conf", "x")
    assert path.stat().st_mode & 0o077 == 0


def test_the_command_line_prints_the_committed_deploy_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--env-passwords"]) == 0
    committed = Path(__file__).resolve().parents[2] / "deploy/nats/nats-server.conf"
    assert capsys.readouterr().out == committed.read_text()


def test_roles_cover_every_route_and_stream() -> None:
    """A new queue group or stream with no server and no writer fails here, not in prod."""
    served = {q for role in ROLES.values() for q in role.serves}
    assert served == {queue for _subject, queue in queue_subjects(SUBJECTS)}
    written = {key for role in ROLES.values() for key in role.writes}
    assert {s.name.removeprefix(f"{PREFIX.upper()}_") for s in SUBJECTS.streams} == written


def test_the_client_account_imports_services_only_streamed_ones_as_streams() -> None:
    """No stream crosses into the client's account (run events above all); `runs.follow`
    is among the brain's client routes (so the authorisation table walks it) and is
    exported with streamed responses, the unary routes as single replies."""
    config = server_config(SUBJECTS, generate_passwords())
    accounts = config["accounts"]
    assert isinstance(accounts, dict)
    imports = accounts["CLIENT"]["imports"]
    assert all(set(item) == {"service"} for item in imports)
    imported = {item["service"]["subject"] for item in imports}
    brain_routes = {r.subject for r in SUBJECTS.routes() if r.queue == QUEUE_BRAIN}
    assert SUBJECTS.run_follow.subject in brain_routes
    assert imported == brain_routes
    exports = {e["service"]: e for e in accounts["TETHER"]["exports"]}
    assert set(exports) == imported
    for subject, export in exports.items():
        streamed = subject == SUBJECTS.run_follow.subject
        assert (export.get("response_type") == "stream") == streamed, subject
    assert ROLES["client"].hears == ()
