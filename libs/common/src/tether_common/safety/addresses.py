"""IP address literals in every spelling a resolver accepts, and the ranges the URL guard
refuses (loopback, private, link-local, CGNAT, metadata, multicast, reserved ...).

IPv4 literals follow `inet_aton`, which is what `getaddrinfo` and most HTTP clients use:
one to four parts, each decimal, octal (leading 0) or hex (0x), the last part filling
the remaining bytes, so `2130706433`, `0177.1` and `0x7f.0.0.1` are all 127.0.0.1.
IPv6 addresses that carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged
by the IPv4 address they carry.
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Most specific entries first: the first match gives the reason shown.
_BLOCKED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("169.254.169.254/32"), "the cloud metadata service"),
    (_V4("100.100.100.200/32"), "the cloud metadata service"),
    (_V4("255.255.255.255/32"), "the broadcast address"),
    (_V4("0.0.0.0/8"), "'this network' (unspecified)"),
    (_V4("10.0.0.0/8"), "a private network"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT (shared address space)"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "a private network"),
    (_V4("192.0.0.0/24"), "IETF protocol assignments"),
    (_V4("192.0.2.0/24"), "documentation (TEST-NET-1)"),
    (_V4("192.88.99.0/24"), "the 6to4 relay anycast range"),
    (_V4("192.168.0.0/16"), "a private network"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation (TEST-NET-2)"),
    (_V4("203.0.113.0/24"), "documentation (TEST-NET-3)"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

_BLOCKED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("fd00:ec2::254/128"), "the cloud metadata service"),
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("::/96"), "IPv4-compatible (deprecated)"),
    (_V6("64:ff9b:1::/48"), "NAT64 local use"),
    (_V6("100::/64"), "discard-only"),
    (_V6("2001::/23"), "IETF protocol assignments (including Teredo)"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("5f00::/16"), "SRv6 segment identifiers"),
    (_V6("fc00::/7"), "a unique local (private) network"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local (deprecated)"),
    (_V6("ff00::/8"), "multicast"),
)

# Never a destination, whatever a deployment allows: credentials live there.
_METADATA: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (
    _V4("169.254.169.254/32"),
    _V4("100.100.100.200/32"),
    _V6("fd00:ec2::254/128"),
)

_GLOBAL_UNICAST = _V6("2000::/3")
_MAPPED = _V6("::ffff:0:0/96")
_TRANSLATED = _V6("::ffff:0:0:0/96")  # SIIT
_NAT64 = _V6("64:ff9b::/96")
_COMPATIBLE = _V6("::/96")

_HEX = re.compile(r"0[xX][0-9a-fA-F]*")
_DIGITS = re.compile(r"[0-9]+")


class MalformedAddressError(ValueError):
    """A host that is numeric like an address but no valid address."""


def _number(part: str) -> int | None:
    """One inet_aton part as a number; None when the part is not numeric at all."""
    if _HEX.fullmatch(part):
        return int(part[2:] or "0", 16)
    if not _DIGITS.fullmatch(part):
        return None
    if len(part) > 1 and part.startswith("0"):
        if not set(part) <= set("01234567"):
            raise MalformedAddressError(f"{part!r} is neither octal nor decimal")
        return int(part, 8)
    return int(part)


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """Decode an IPv4 literal in any inet_aton spelling; None if `host` is not numeric.

    Raises MalformedAddressError for numeric hosts no resolver would agree on.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or len(host) > 64:
        return None
    numbers = [_number(part) for part in parts]
    values = [number for number in numbers if number is not None]
    if len(values) != len(numbers):
        return None
    *head, last = values
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        raise MalformedAddressError(f"{host!r} is out of range for an IPv4 address")
    packed = 0
    for value in head:
        packed = packed * 256 + value
    return ipaddress.IPv4Address(packed * 256 ** (4 - len(head)) + last)


def parse_address(text: str) -> IPAddress:
    """An address from its text: IPv6 (brackets optional, no zone) or any IPv4 spelling."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "%" in bare:
        raise MalformedAddressError("zone identifiers (%...) are not accepted")
    if ":" in bare:
        try:
            return ipaddress.IPv6Address(bare)
        except ValueError as exc:
            raise MalformedAddressError(f"{bare!r} is not a valid IPv6 address") from exc
    address = parse_ipv4(bare)
    if address is None:
        raise MalformedAddressError(f"{text!r} is not an IP address")
    return address


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, SIIT, NAT64, 6to4, compatible)."""
    if address in _MAPPED or address in _TRANSLATED or address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _COMPATIBLE and int(address) > 1:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_metadata(address: IPAddress) -> bool:
    """Whether `address` is a cloud metadata service, also inside an IPv6 address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None and is_metadata(inner):
            return True
    return any(address in network for network in _METADATA)


def blocked_reason(address: IPAddress) -> str | None:
    """Why the URL guard refuses `address`, or None when it is a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        return _blocked_v6(address)
    for network, reason in _BLOCKED_V4:
        if address in network:
            return reason
    return None if address.is_global else "not globally routable"


def _blocked_v6(address: ipaddress.IPv6Address) -> str | None:
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = blocked_reason(inner)
        if reason is not None:
            return f"{reason} (as {inner} inside {address})"
    for network, reason in _BLOCKED_V6:
        if address in network:
            return reason
    if inner is not None:
        return None  # mapped/NAT64/6to4 of a public address: judged by that address
    if address not in _GLOBAL_UNICAST or not address.is_global:
        return "not globally routable"
    return None
