"""Asking a hook (`tether_brain.hooks.calling`): an HTTPS hook signed and sent over TLS to
a local receiver whose self-signed certificate the brain is told to trust
(`hooks_ca_file`), checking the signature as a tenant's endpoint would; timeouts; every
reply out of shape read as a failure with its reason; the URL guard at registration and
at each call (a name that resolves somewhere private is refused when dialled)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hook_receiver import Endpoint, Receiver, serve_tls
from tether_brain.hooks import Caller, Destinations, Failed, StoredHook, read_reply, run_builtin
from tether_client.server.natsauth import all_users, permissions
from tether_common.errors import MessageError
from tether_common.messages.hooks import HookCall, HookPoint, HookReply, HookRequest, HookSpec
from tether_common.safety.urls import PrivateHosts
from tether_common.subjects import Subjects

SECRET = "hksec_" + "s" * 40
MAX = 4096


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    with serve_tls(tmp_path_factory.mktemp("tls"), Receiver(secret=SECRET)) as found:
        yield found


@pytest.fixture
def receiver(endpoint: Endpoint) -> Receiver:
    """The module's endpoint, answering an allow at once until told otherwise."""
    fresh, found = Receiver(secret=SECRET), endpoint.receiver
    found.status, found.body, found.delay_s, found.seen = fresh.status, fresh.body, 0.0, []
    return found


def https_hook(url: str, *, timeout_s: float = 2.0) -> StoredHook:
    spec = HookSpec(
        name="checker", point="before_tool", transport="https", target=url, timeout_s=timeout_s
    )
    return StoredHook(spec, SECRET)


def request(point: HookPoint = "before_tool") -> HookRequest:
    return HookRequest(
        hook="checker",
        point=point,
        tenant="acme",
        run_id="run_1",
        call=HookCall(id="c1", name="shell", arguments={"command": "rm -rf build"}),
    )


def caller(ca_file: Path | None, private: tuple[str, ...] = ("127.0.0.1",)) -> Caller:
    destinations = Destinations(PrivateHosts.of(private))
    return Caller(None, run_builtin, destinations, max_reply_bytes=MAX, ca_file=ca_file)


async def test_an_https_hook_is_signed_and_its_answer_read(
    endpoint: Endpoint, receiver: Receiver
) -> None:
    receiver.body = json.dumps(
        {"action": "rewrite", "arguments": {"command": "rm -rf build/tmp"}}
    ).encode()
    answer = await caller(endpoint.ca_file).call(https_hook(endpoint.url), request())
    assert answer == HookReply(action="rewrite", arguments={"command": "rm -rf build/tmp"})
    (seen,) = receiver.seen
    assert seen["signed"]
    assert not seen["forged"]
    assert seen["hook"] == "checker"
    assert seen["body"]["call"]["arguments"] == {"command": "rm -rf build"}


async def test_a_certificate_not_trusted_is_unreachable(
    endpoint: Endpoint, receiver: Receiver
) -> None:
    answer = await caller(None).call(https_hook(endpoint.url), request())
    assert isinstance(answer, Failed)
    assert answer.reason == "unreachable"
    assert receiver.seen == []


async def test_a_slow_hook_times_out(endpoint: Endpoint, receiver: Receiver) -> None:
    receiver.delay_s = 1.0
    started = time.monotonic()
    answer = await caller(endpoint.ca_file).call(https_hook(endpoint.url, timeout_s=0.2), request())
    assert answer == Failed("timeout", "no reply within 0.2s")
    assert time.monotonic() - started < 0.9


BAD_REPLIES = [
    (200, b"not json at all", "malformed"),
    (200, b"[1, 2, 3]", "malformed"),
    (200, b'{"action": "explode"}', "wrong_shape"),
    (200, b'{"action": "rewrite"}', "wrong_shape"),  # a rewrite without arguments
    (200, b'{"action": "redact", "content": "x"}', "wrong_shape"),  # not an answer here
    (200, b'{"action": "allow", "surprise": 1}', "wrong_shape"),
    (200, b'{"action": "allow", "reason": NaN}', "malformed"),
    (200, b'{"error": {"code": "internal", "message": "x"}}', "error"),
    (200, b'{"action": "deny", "reason": "' + b"x" * (MAX + 10) + b'"}', "too_large"),
    (500, b'{"action": "allow"}', "http_status"),
    (302, b"", "http_status"),
]


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    BAD_REPLIES,
    ids=[r[2] + f"-{i}" for i, r in enumerate(BAD_REPLIES)],
)
async def test_a_reply_out_of_shape_is_a_failure_with_its_reason(
    endpoint: Endpoint, receiver: Receiver, status: int, body: bytes, reason: str
) -> None:
    receiver.status, receiver.body = status, body
    answer = await caller(endpoint.ca_file).call(https_hook(endpoint.url), request())
    assert isinstance(answer, Failed), answer
    assert answer.reason == reason


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "https://metadata.google.internal/",
        "http://localhost:8080/",
        "https://10.0.0.7/hook",
        "https://192.168.1.1/hook",
        "https://[::1]/hook",
        "https://0x7f000001/hook",
        "https://2130706433/hook",
        "https://127.1/hook",
        "https://100.64.0.1/hook",
        "https://user:pw@hooks.example.com/",
        "http://hooks.example.com/",  # plain http to a public host
        "ftp://hooks.example.com/",
        "https://hooks.internal/",
    ],
)
def test_a_refused_url_is_refused_when_added(url: str) -> None:
    with pytest.raises(MessageError) as refused:
        Destinations(PrivateHosts.of([])).registered(url)
    assert refused.value.code == "hook_refused"


def test_a_named_private_host_is_taken() -> None:
    destinations = Destinations(PrivateHosts.of(["127.0.0.1"]))
    assert destinations.registered("http://127.0.0.1:9999/hook") == "http://127.0.0.1:9999/hook"
    with pytest.raises(MessageError):
        destinations.registered("http://127.0.0.2:9999/hook")  # named hosts only


@pytest.mark.parametrize(
    "answers", [["10.0.0.5"], ["169.254.169.254"], ["8.8.8.8", "127.0.0.1"], []]
)
async def test_a_name_that_resolves_somewhere_refused_is_not_dialled(answers: list[str]) -> None:
    """DNS is asked once, at the call; any answer the guard refuses refuses the call."""
    destinations = Destinations(PrivateHosts.of([]), resolver=lambda _host: answers)
    hooks = Caller(None, run_builtin, destinations, max_reply_bytes=MAX)
    answer = await hooks.call(https_hook("https://hooks.example.com/x"), request())
    assert isinstance(answer, Failed)
    assert answer.reason == "refused"


def test_a_reply_that_fits_is_read() -> None:
    reply = read_reply(b'{"action": "deny", "reason": "no"}', request(), MAX)
    assert reply == HookReply(action="deny", reason="no")
    answer = read_reply(b'{"action": "block"}', request("before_answer"), MAX)
    assert answer == HookReply(action="block")


def test_only_the_hooks_user_may_answer_a_hook() -> None:
    """On the bus as shipped, a hook's subject is answered by the `hooks` user alone (a
    client must never answer for the hooks that judge its runs) and called by the brain."""
    subjects = Subjects("tether")
    hooks = f"{subjects.hooks_all} hooks"
    for user in all_users(["acme"]):
        perms = permissions(subjects, user)
        subscribe = perms["subscribe"]["allow"]  # type: ignore[index]
        publish = perms["publish"].get("allow", [])  # type: ignore[attr-defined]
        assert (hooks in subscribe) is (user == "hooks"), user
        assert not any(s.startswith(subjects.hooks_all[:-1]) for s in subscribe if s != hooks)
        assert (subjects.hooks_all in publish) is (user == "brain"), user
