"""Pinning a URL to its checked address, and the private hosts a deployment may allow:
the guard's exceptions admit exactly the named host and port, never a metadata service."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether_common.errors import BlockedDestination
from tether_common.safety.pinning import pin
from tether_common.safety.urls import NO_PRIVATE_HOSTS, PrivateHosts, check, check_address

PUBLIC = "93.184.216.34"


def never(host: str) -> Sequence[str]:
    raise AssertionError(f"{host} is a literal: nothing to resolve")


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://2130706433/", "127.0.0.1"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://0177.0.0.1/", "127.0.0.1"),
        ("http://127.0.0.1./", "127.0.0.1"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
        ("http://[::1]:8222/", "::1"),
        ("http://2852039166/", "169.254.169.254"),
    ],
)
def test_a_literal_in_any_spelling_is_checked_as_the_address_it_is(url: str, address: str) -> None:
    with pytest.raises(BlockedDestination, match="is"):
        pin(url, never, check_address)
    assert pin(url, never, lambda ip: None).address == address


def test_the_pinned_request_keeps_the_name_for_host_and_tls() -> None:
    pinned = pin("https://hooks.example.test:8443/a?b=1#frag", lambda h: [PUBLIC], check_address)
    assert pinned.url == f"https://{PUBLIC}:8443/a?b=1"
    assert pinned.headers == {"Host": "hooks.example.test:8443"}
    assert pinned.extensions == {"sni_hostname": "hooks.example.test"}
    plain = pin("http://hooks.example.test", lambda h: ["2606:4700::1111"], check_address)
    assert (plain.url, plain.extensions) == ("http://[2606:4700::1111]/", {})


@pytest.mark.parametrize(
    ("answers", "code"),
    [
        ([PUBLIC, "127.0.0.1"], "blocked_destination"),
        (["::ffff:10.0.0.1"], "blocked_destination"),
        (["fe80::1%eth0"], "blocked_destination"),
        ([], "dns_failed"),
    ],
)
def test_every_answer_is_checked(answers: list[str], code: str) -> None:
    with pytest.raises(BlockedDestination) as refused:
        pin("http://hooks.example.test/", lambda h: answers, check_address)
    assert refused.value.code == code


def test_a_resolver_failure_is_a_refusal() -> None:
    def broken(host: str) -> Sequence[str]:
        raise OSError("SERVFAIL")

    with pytest.raises(BlockedDestination) as refused:
        pin("http://hooks.example.test/", broken, check_address)
    assert refused.value.code == "dns_failed"


NAMED = PrivateHosts.of(["chat.internal", "127.0.0.1:8080", "[fd00::5]:443"])


@pytest.mark.parametrize(
    ("url", "admitted"),
    [
        ("http://chat.internal/", True),
        ("http://Chat.Internal.:9/", True),
        ("http://127.0.0.1:8080/", True),
        ("http://2130706433:8080/", True),
        ("http://127.0.0.1/", False),
        ("https://127.0.0.1:8080/", True),
        ("http://127.0.0.1:80/", False),
        ("https://[fd00::5]/", True),
        ("http://[fd00::5]/", False),  # port 80, not the named 443
        ("http://sub.chat.internal/", False),
        ("http://chat.internal@127.0.0.1:8080/", False),
        ("not a url", False),
    ],
)
def test_named_private_hosts_admit_exactly_their_host_and_port(url: str, admitted: bool) -> None:
    assert NAMED.admits(url) is admitted


def test_an_admitted_host_may_be_private_but_never_metadata() -> None:
    check("http://127.0.0.1:8080/", private=NAMED)
    check("http://chat.internal/", resolver=lambda h: ["10.0.0.7"], private=NAMED)
    for answer in ("169.254.169.254", "::ffff:a9fe:a9fe", "fd00:ec2::254", "100.100.100.200"):
        with pytest.raises(BlockedDestination, match="metadata"):
            check("http://chat.internal/", resolver=lambda h, a=answer: [a], private=NAMED)  # type: ignore[misc]
    everything = PrivateHosts(everything=True)
    check("http://localhost:4222/", private=everything)
    for url in (
        "http://169.254.169.254/",
        "http://metadata.google.internal/",
        "http://0xa9fea9fe/",
    ):
        with pytest.raises(BlockedDestination):
            check(url, private=everything)
    with pytest.raises(BlockedDestination):
        check("http://127.0.0.1:8080/", private=NO_PRIVATE_HOSTS)


def test_check_address_lets_private_through_only_when_asked() -> None:
    with pytest.raises(BlockedDestination):
        check_address("10.0.0.1")
    check_address("10.0.0.1", private_ok=True)
    with pytest.raises(BlockedDestination, match="metadata"):
        check_address("::ffff:169.254.169.254", private_ok=True)


@pytest.mark.parametrize(
    "entry",
    ["", "a b", "http://x/", "user@x", "x:0", "x:65536", "[::1", "169.254.169.254", "metadata"],
)
def test_a_bad_entry_is_a_value_error_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="is not an allowed host"):
        PrivateHosts.of([entry])
