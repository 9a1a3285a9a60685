"""The URL guard: every spelling of a blocked address, DNS answers, malformed URLs."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether_common.errors import BlockedDestination
from tether_common.safety.addresses import embedded_ipv4
from tether_common.safety.urls import check, check_address

_DNS: dict[str, list[str]] = {
    "example.com": ["93.184.216.34"],
    "sub.example.com": ["93.184.216.34"],
    "under_score.example.com": ["93.184.216.34"],
    "xn--bcher-kva.example": ["93.184.216.34"],
    "v6.test": ["2606:2800:220:1:248:1893:25c8:1946"],
    "multi.test": ["93.184.216.34", "2606:4700:4700::1111"],
    "evil.test": ["127.0.0.1"],
    "rebind.test": ["93.184.216.34", "10.0.0.1"],
    "v6loop.test": ["::1"],
    "mapped.test": ["::ffff:10.0.0.1"],
    "meta.test": ["169.254.169.254"],
    "linklocal6.test": ["fe80::1%eth0"],
    "empty.test": [],
    "garbage.test": ["not-an-ip"],
}


def fake_resolver(host: str) -> Sequence[str]:
    """Answers from a fixed table; unknown names fail like NXDOMAIN."""
    if host not in _DNS:
        raise OSError(f"no such host {host}")
    return _DNS[host]


ALLOWED = [
    "http://example.com/",
    "https://example.com/",
    "https://example.com:8443/path?q=1#frag",
    "HTTP://EXAMPLE.COM/",
    "https://Example.Com./x",
    "http://example.com",
    "http://8.8.8.8/",
    "http://1.1.1.1:80/",
    "http://134744072/",
    "http://0x08080808/",
    "http://[2606:4700:4700::1111]/",
    "http://[::ffff:8.8.8.8]/",
    "http://[64:ff9b::808:808]/",
    "http://[2002:808:808::1]/",
    "http://bücher.example/",
    "http://xn--bcher-kva.example/",
    "http://sub.example.com/",
    "http://under_score.example.com/",
    "http://example.com:65535/",
    "http://v6.test/",
    "http://multi.test/",
    "https://example.com/a%2fb",
    "http://example.com/?q=127.0.0.1",
    "http://example.com/#@127.0.0.1",
    "http://example.com/path@127.0.0.1",
]

BLOCKED = [
    # loopback in every spelling
    "http://127.0.0.1/",
    "http://127.0.0.1:8080/",
    "http://127.1/",
    "http://127.0.1/",
    "http://2130706433/",
    "http://017700000001/",
    "http://0177.0.0.1/",
    "http://0177.0.0.01/",
    "http://0x7f.0.0.1/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0X7F000001/",
    "http://0x7f.0x0.0x0.0x1/",
    "http://127.000.000.001/",
    "http://00000177.0.0.1/",
    "http://127.0.0.1./",
    "http://localhost/",
    "http://LOCALHOST/",
    "http://localhost./",
    "http://foo.localhost/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::]/",
    "http://0.0.0.0/",
    "http://0/",
    # IPv6 wrappers around private IPv4
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:10.0.0.1]/",
    "http://[::127.0.0.1]/",
    "http://[::8.8.8.8]/",
    "http://[::ffff:0:127.0.0.1]/",
    "http://[64:ff9b::127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b:1::1]/",
    "http://[2002:7f00:1::1]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    # IPv6 ranges
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://[fd00:ec2::254]/",
    "http://[ff02::1]/",
    "http://[2001:db8::1]/",
    "http://[100::1]/",
    "http://[fec0::1]/",
    "http://[4000::1]/",
    # private, link-local, CGNAT, metadata, multicast, reserved
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://10.1/",
    "http://012.1/",
    "http://0xa.1/",
    "http://167772161/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://192.168.1.1/",
    "http://192.168.0.1:80/",
    "http://3232235777/",
    "http://169.254.169.254/",
    "http://169.254.169.254/latest/meta-data/",
    "http://0xa9fea9fe/",
    "http://2852039166/",
    "http://0251.0376.0251.0376/",
    "http://169.254.1.1/",
    "http://100.64.0.1/",
    "http://100.127.255.255/",
    "http://100.100.100.200/",
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
    "http://198.18.0.1/",
    "http://198.19.255.255/",
    "http://192.0.2.1/",
    "http://198.51.100.1/",
    "http://203.0.113.1/",
    "http://192.0.0.170/",
    # names
    "http://metadata.google.internal/",
    "http://metadata.google.internal./",
    "http://METADATA.GOOGLE.INTERNAL/",
    "http://metadata/",
    "http://instance-data/",
    "http://printer.local/",
    "http://db.internal/",
    "http://router.home.arpa/",
    "http://%31%32%37%2e%30%2e%30%2e%31/",
    "http://%6c%6f%63%61%6c%68%6f%73%74/",
    "http://１２７.０.０.１/",
    "http://127。0。0。1/",
    "http://ｌｏｃａｌｈｏｓｔ/",
    # DNS answers
    "http://evil.test/",
    "http://rebind.test/",
    "http://v6loop.test/",
    "http://mapped.test/",
    "http://meta.test/",
    "http://linklocal6.test/",
    "http://garbage.test/",
    # schemes and shapes
    "ftp://example.com/",
    "file:///etc/passwd",
    "gopher://example.com/",
    "javascript:alert(1)",
    "data:text/html,x",
    "dict://127.0.0.1:11211/",
    "ldap://example.com",
    "//example.com/",
    "example.com",
    "http:example.com",
    "http:/example.com",
    "http:///example.com",
    "http://",
    "https://",
    "",
    # userinfo and parser differentials
    "http://user:pass@example.com/",
    "http://user@example.com/",
    "http://@example.com/",
    "http://example.com@127.0.0.1/",
    "http://127.0.0.1#@example.com/",
    "http://example.com\\@127.0.0.1/",
    "http://example.com%40127.0.0.1/",
    "http://example.com\t/",
    "http://exa\nmple.com/",
    " http://example.com/",
    "http://example.com /",
    "http://ex ample.com/",
    "http://example.com\x00/",
    # malformed hosts and ports
    "http://example.com:0/",
    "http://example.com:65536/",
    "http://example.com:abc/",
    "http://example.com:８０/",
    "http://[::1/",
    "http://::1/",
    "http://[::1]x/",
    "http://[::ffff:0x7f.1]/",
    "http://1.2.3.4.5/",
    "http://256.0.0.1/",
    "http://1.2.3.256/",
    "http://08.1/",
    "http://0x100.0.0.1/",
    "http://4294967296/",
    "http://example.123/",
    "http://foo.0x1/",
    "http://a..b/",
    "http://.example.com/",
    "http://example.com../",
    "http://-example.com/",
    "http://exa%2fmple.com/",
    "http://exa%00mple.com/",
    "http://%zz/",
    "http://%25%33%31%32%37.0.0.1/",
    "http://" + "a" * 64 + ".com/",
    "http://" + "a." * 130 + "com/",
    "http://" + "a" * 9000 + ".com/",
]


@pytest.mark.parametrize("url", ALLOWED)
def test_public_http_urls_pass(url: str) -> None:
    check(url, resolver=fake_resolver)


@pytest.mark.parametrize("url", BLOCKED)
def test_blocked_destinations_are_refused(url: str) -> None:
    with pytest.raises(BlockedDestination) as caught:
        check(url, resolver=fake_resolver)
    assert caught.value.code in {"blocked_destination", "dns_failed"}
    assert caught.value.message


@pytest.mark.parametrize("url", ["http://nx.test/", "http://empty.test/"])
def test_dns_failure_is_a_refusal_with_its_own_code(url: str) -> None:
    with pytest.raises(BlockedDestination) as caught:
        check(url, resolver=fake_resolver)
    assert caught.value.code == "dns_failed"


def test_a_resolver_that_misbehaves_is_a_refusal() -> None:
    def broken(_host: str) -> Sequence[str]:
        raise RuntimeError("resolver bug")

    with pytest.raises(BlockedDestination, match="could not resolve"):
        check("http://example.com/", resolver=broken)


def test_a_literal_address_needs_no_resolver() -> None:
    def never(_host: str) -> Sequence[str]:
        raise AssertionError("no DNS for literals")

    check("http://8.8.8.8/", resolver=never)
    with pytest.raises(BlockedDestination):
        check("http://127.0.0.1/", resolver=never)


def test_blocked_names_are_refused_before_any_lookup() -> None:
    with pytest.raises(BlockedDestination, match="local or cloud-metadata"):
        check("http://metadata.google.internal/computeMetadata/v1/")


def test_the_reason_names_the_range() -> None:
    with pytest.raises(BlockedDestination, match="loopback"):
        check("http://0x7f.1/", resolver=fake_resolver)
    with pytest.raises(BlockedDestination, match="metadata"):
        check("http://2852039166/", resolver=fake_resolver)


@pytest.mark.parametrize(
    "ip",
    [
        "127.0.0.1",
        "10.1.2.3",
        "169.254.169.254",
        "100.100.100.200",
        "::1",
        "::ffff:127.0.0.1",
        "fe80::1%eth0",
        "fd00:ec2::254",
        "0.0.0.0",
        "::",
        "not-an-ip",
        "",
        "[::1]",
        "2130706433",
    ],
)
def test_check_address_refuses_what_was_dialled(ip: str) -> None:
    with pytest.raises(BlockedDestination):
        check_address(ip)


@pytest.mark.parametrize("ip", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "[2606::1]"])
def test_check_address_lets_public_addresses_through(ip: str) -> None:
    check_address(ip)


_SETTINGS = settings(max_examples=300, deadline=None, database=None)


@_SETTINGS
@given(st.text(max_size=200))
def test_check_raises_only_blocked_destination(url: str) -> None:
    with contextlib.suppress(BlockedDestination):
        check(url, resolver=fake_resolver)


@_SETTINGS
@given(st.text(max_size=60))
def test_check_raises_only_blocked_destination_for_any_host(host: str) -> None:
    with contextlib.suppress(BlockedDestination):
        check(f"http://{host}/", resolver=fake_resolver)


@_SETTINGS
@given(st.text(max_size=60))
def test_check_address_raises_only_blocked_destination(ip: str) -> None:
    with contextlib.suppress(BlockedDestination):
        check_address(ip)


@_SETTINGS
@given(st.ip_addresses())
def test_every_passed_address_is_public(address: IPv4Address | IPv6Address) -> None:
    try:
        check_address(str(address))
    except BlockedDestination:
        return
    inner = embedded_ipv4(address) if isinstance(address, IPv6Address) else None
    assert (inner or address).is_global
