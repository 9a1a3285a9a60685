"""Where webhooks may go: every spelling of a loopback, private, link-local or metadata
receiver refused at registration; the deployment's named private hosts admitting only
themselves; at delivery, every DNS answer checked and the connection pinned to the one
that was checked (the `Host` header and TLS name kept), never a redirect followed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.notices.destinations import Destinations
from tether_approvals.notices.outbox import Claimed, Sender
from tether_approvals.settings import WebhookSettings
from tether_approvals.testing.receiver import receiver
from tether_common.db import make_engine
from tether_common.errors import BlockedDestination, MessageError
from tether_common.messages.approvals import ApprovalNotice

PUBLIC = "93.184.216.34"

# Every way to write a receiver in the service's own network, as written at registration.
REFUSED = [
    # loopback, in every IPv4 spelling inet_aton takes, with and without a port
    "http://127.0.0.1/hook",
    "http://127.0.0.1:4222/",
    "http://127.0.0.2:8222/varz",
    "http://127.1:5432/",
    "http://2130706433/",
    "http://2130706433:8222/",
    "http://017700000001/",
    "http://0177.0.0.1/",
    "http://0x7f.1/",
    "http://0x7f000001:8100/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://127.000.000.001/",
    "http://127.0.0.1./",
    "http://localhost/",
    "http://localhost.:8100/",
    "http://LocalHost/",
    "http://svc.localhost/",
    "http://[::1]/",
    "http://[::1]:4222/",
    "http://[0:0:0:0:0:0:0:1]/",
    # IPv6 forms carrying a private IPv4 address
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]:8222/",
    "http://[::ffff:10.0.0.5]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::1]/",
    "http://[::127.0.0.1]/",
    # unspecified
    "http://0.0.0.0:8100/",
    "http://0/",
    "http://[::]/",
    # link-local and cloud metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.0.1/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    "http://100.100.100.200/",
    "http://[fd00:ec2::254]/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata.google.internal./",
    "http://metadata/",
    # private, unique local, CGNAT, multicast, reserved
    "http://10.0.0.5/",
    "http://10.1/",
    "http://012.1/",
    "http://167772161/",
    "http://172.16.3.4/",
    "http://192.168.1.1:8080/",
    "http://3232235777/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://100.64.0.1/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
    # local names
    "http://db.internal/",
    "http://printer.local/",
    "http://router.home.arpa/",
    "http://%6c%6f%63%61%6c%68%6f%73%74/",
    "http://１２７.０.０.１/",
    # shapes no parser agrees on
    "http://127.0.0.1#@hooks.example.test/",
    "http://hooks.example.test\\@127.0.0.1/",
    "http://hooks.example.test%40127.0.0.1/",
    "http://[::ffff:0x7f.1]/",
    "http://256.0.0.1/",
]


def no_dns(host: str) -> Sequence[str]:
    raise AssertionError(f"registration resolved {host}")


@pytest.mark.parametrize("url", REFUSED)
def test_registration_refuses_every_spelling_of_a_private_receiver(url: str) -> None:
    with pytest.raises(MessageError) as refused:
        Destinations(WebhookSettings(), no_dns).registered(url)
    assert refused.value.code == "webhook_url_refused"


@pytest.mark.parametrize("url", REFUSED)
def test_a_delivery_refuses_them_too(url: str) -> None:
    """An endpoint stored before this check (or written into the table) is not sent to."""
    with pytest.raises(BlockedDestination):
        Destinations(WebhookSettings(), lambda host: [PUBLIC]).pinned(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T/B/X",
        "https://8.8.8.8/x",
        "http://a.example/",
        "https://hooks.example.test:8443/x?y=1",
        "http://[2606:4700:4700::1111]/",
    ],
)
def test_public_receivers_are_taken_as_written_without_a_lookup(url: str) -> None:
    assert Destinations(WebhookSettings(), no_dns).registered(url) == url


def test_the_default_refuses_private_receivers() -> None:
    settings = WebhookSettings()
    assert (settings.allow_private, settings.private_hosts) == (False, [])


NAMED = WebhookSettings(private_hosts=["127.0.0.1:8080", "chat.internal", "[fd00::5]"])


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://2130706433:8080/hook",  # the same address, spelled otherwise
        "http://0x7f.1:8080/",
        "http://chat.internal/x",
        "http://CHAT.Internal./x",
        "https://chat.internal:9443/x",
        "http://[fd00::5]/",
        "https://[fd00:0::5]:9/",
    ],
)
def test_a_named_private_host_is_admitted(url: str) -> None:
    assert Destinations(NAMED, no_dns).registered(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",  # another port
        "http://127.0.0.1:8081/",
        "http://127.0.0.2:8080/",
        "http://[::ffff:127.0.0.1]:8080/",  # not how the deployment named it
        "http://[::1]:8080/",
        "http://localhost:8080/",
        "http://other.internal/",
        "http://chat.internal.evil.test.internal/",
        "http://[fd00::6]/",
        "http://10.0.0.5/",
    ],
)
def test_a_named_private_host_admits_nothing_else(url: str) -> None:
    with pytest.raises(MessageError):
        Destinations(NAMED, no_dns).registered(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://2852039166/",
        "http://100.100.100.200/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/",
        "http://metadata/",
    ],
)
def test_a_metadata_service_is_refused_even_when_every_private_host_is_allowed(url: str) -> None:
    with pytest.raises(MessageError):
        Destinations(WebhookSettings(allow_private=True), no_dns).registered(url)


@pytest.mark.parametrize(
    "entry",
    [
        "http://chat.internal/",
        "user@chat.internal",
        "chat.internal:0",
        "chat.internal:99999",
        "chat.internal:http",
        "[::1",
        "a b",
        "",
        "169.254.169.254",
        "[::ffff:169.254.169.254]:80",
        "metadata.google.internal",
        "0xa9fea9fe",
    ],
)
def test_a_bad_private_host_entry_stops_the_service(entry: str) -> None:
    with pytest.raises(ValidationError):
        WebhookSettings(private_hosts=[entry])


@pytest.mark.parametrize(
    ("answers", "code"),
    [
        (["127.0.0.1"], "blocked_destination"),
        (["::1"], "blocked_destination"),
        (["::ffff:127.0.0.1"], "blocked_destination"),
        ([PUBLIC, "10.0.0.1"], "blocked_destination"),  # every answer is checked
        (["169.254.169.254"], "blocked_destination"),
        (["fe80::1%eth0"], "blocked_destination"),
        (["100.64.0.1"], "blocked_destination"),
        (["not-an-address"], "blocked_destination"),
        ([], "dns_failed"),
        (OSError("no such host"), "dns_failed"),
    ],
)
def test_each_answer_of_a_name_is_checked_at_delivery(
    answers: list[str] | OSError, code: str
) -> None:
    def resolve(host: str) -> Sequence[str]:
        if isinstance(answers, OSError):
            raise answers
        return answers

    with pytest.raises(BlockedDestination) as refused:
        Destinations(WebhookSettings(), resolve).pinned("https://hooks.example.test/x")
    assert refused.value.code == code


@pytest.mark.parametrize("answer", ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"])
def test_an_allowed_name_still_may_not_resolve_to_a_metadata_service(answer: str) -> None:
    settings = WebhookSettings(private_hosts=["chat.internal"])
    with pytest.raises(BlockedDestination):
        Destinations(settings, lambda host: [answer]).pinned("http://chat.internal/x")
    pinned = Destinations(settings, lambda host: ["10.1.2.3"]).pinned("http://chat.internal/x")
    assert (pinned.url, pinned.headers) == ("http://10.1.2.3/x", {"Host": "chat.internal"})


async def _ignore(subject: str, told: ApprovalNotice) -> None:
    raise AssertionError("no NATS notice here")


def claimed(url: str) -> Claimed:
    body = '{"card": {"approval_id": "apr_x"}}'
    now = datetime.now(UTC)
    return Claimed(
        "dlv_x", "ntc_x", "webhook", None, "approval.requested", "whk_x", body, 1, now, url, "s"
    )


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    """The sender needs one; `_send` never uses it (nothing connects)."""
    made = make_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    yield made
    await made.dispose()


async def test_a_delivery_resolves_once_and_connects_to_what_it_checked(
    engine: AsyncEngine,
) -> None:
    """DNS rebinding: the second answer (loopback) is never asked for, and the request
    goes to the first, checked one, with the receiver's name in `Host` and for TLS. A
    redirect is an answer, not a hop."""
    asked: list[str] = []
    answers = iter([[PUBLIC], ["127.0.0.1"]])
    seen: list[httpx.Request] = []

    def resolve(host: str) -> Sequence[str]:
        asked.append(host)
        return next(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://127.0.0.1:4222/"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer), follow_redirects=False)
    sender = Sender(engine, WebhookSettings(), _ignore, client=client, resolver=resolve)
    try:
        error = await sender._send(claimed("https://hooks.example.test:8443/in?x=1"))
    finally:
        await sender.aclose()
    assert error == "http_302"
    assert asked == ["hooks.example.test"]
    [request] = seen
    assert str(request.url) == f"https://{PUBLIC}:8443/in?x=1"
    assert request.headers["host"] == "hooks.example.test:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.test"


async def test_a_refused_delivery_sends_nothing_and_says_only_its_class(
    engine: AsyncEngine,
) -> None:
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"sent to {request.url}")

    client = httpx.AsyncClient(transport=httpx.MockTransport(never))
    sender = Sender(engine, WebhookSettings(), _ignore, client=client, resolver=lambda h: ["::1"])
    try:
        assert await sender._send(claimed("http://hooks.example.test/")) == "blocked_destination"
        assert await sender._send(claimed("http://2130706433:8222/")) == "blocked_destination"
    finally:
        await sender.aclose()


async def test_a_named_private_receiver_is_reached_at_its_checked_address(
    engine: AsyncEngine,
) -> None:
    """A real connection: the name resolves only through the sender's resolver (the
    system's knows nothing of it), so the delivery arrives only if it was pinned."""
    settings = WebhookSettings(private_hosts=["receiver.test"])
    resolve = {"receiver.test": ["127.0.0.1"]}.__getitem__
    sender = Sender(engine, settings, _ignore, resolver=resolve)
    try:
        async with receiver() as found:
            found.secret = "s"
            url = f"http://receiver.test:{found.port}/hook"
            assert await sender._send(claimed(url)) is None
            [delivery] = found.seen
            assert delivery.verified
            assert delivery.headers["host"] == f"receiver.test:{found.port}"
            # The same receiver by an address nobody named is refused.
            elsewhere = claimed(f"http://127.0.0.1:{found.port}/hook")
            assert await sender._send(elsewhere) == "blocked_destination"
            assert len(found.seen) == 1
    finally:
        await sender.aclose()
