"""The URL guard: decides whether `web_fetch` (or anything else) may connect to a URL.

`check(url)` refuses anything but plain http(s) URLs to public hosts: no credentials in
the URL, no ambiguous characters, and every address the host resolves to must be a
public unicast address (see `addresses` for the ranges and the literal spellings that
are decoded). `check_address(ip)` is the connect-time re-check of the address actually
dialled, which closes the gap a DNS answer that changes between check and connect
(DNS rebinding) would leave; callers must use it on every connection and redirect.

Both raise only `BlockedDestination`; a DNS failure is `code=ErrorCode.DNS_FAILED`, never a pass.

`PrivateHosts` is what a deployment may allow beyond public hosts (the approvals
service's webhook receivers in its own network): named hosts, on any port or one, or
every non-public address. A cloud metadata service is refused whatever is allowed.
"""

from __future__ import annotations

import re
import socket
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from tether_common.errors import BlockedDestination, ErrorCode

from .addresses import (
    IPAddress,
    MalformedAddressError,
    blocked_reason,
    is_metadata,
    parse_address,
    parse_ipv4,
)

__all__ = [
    "NO_PRIVATE_HOSTS",
    "PrivateHosts",
    "Resolver",
    "check",
    "check_address",
    "host_literal",
    "system_resolver",
]

Resolver = Callable[[str], Sequence[str]]
"""Maps a host name to the IP address strings it resolves to."""

MAX_URL_LENGTH = 8192
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_HOST_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f/\\?#@:\[\]<>^|%\"'`{}]|\s")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")
_DOTS = re.compile("[\u3002\uff0e\uff61]")
_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data"}
)
_BLOCKED_NAMES = _METADATA_NAMES | {"localhost"}
_BLOCKED_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _blocked(message: str, code: str | None = None) -> BlockedDestination:
    return BlockedDestination(message, code=code)


def system_resolver(host: str) -> list[str]:
    """Resolve with the operating system (the default resolver)."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class PrivateHosts:
    """Non-public destinations a deployment allows: all of them (`everything`), or the
    named `hosts`, each as `(host, port)` with port None for any. A host is compared as
    the guard reads it: an address in any spelling is that address (`2130706433` is
    `127.0.0.1`), a name is case-folded with one trailing dot dropped. Build with `of`."""

    everything: bool = False
    hosts: frozenset[tuple[str, int | None]] = frozenset()

    @classmethod
    def of(cls, entries: Iterable[str], *, everything: bool = False) -> PrivateHosts:
        """From `host` or `host:port` entries (`[v6]:port` for IPv6); ValueError names a
        bad entry, and a metadata service is never allowed."""
        hosts: set[tuple[str, int | None]] = set()
        for entry in entries:
            try:
                host, port = _split_netloc(entry)
                key = _host_key(host)
                if key in _METADATA_NAMES or _is_metadata_literal(key):
                    raise _blocked("a cloud metadata service is never a destination")
                if _literal(host) is None:
                    _check_name(host, private_ok=True)
            except BlockedDestination as exc:
                raise ValueError(
                    f"{entry!r} is not an allowed host[:port]: {exc.message}"
                ) from None
            hosts.add((key, port))
        return cls(everything=everything, hosts=frozenset(hosts))

    def admits(self, url: str) -> bool:
        """Whether `url`'s host and port are allowed to be non-public (False when `url`
        is malformed: the guard then refuses it for that)."""
        try:
            scheme, host, port = _parts_of(url)
            key = _host_key(host)
        except Exception:  # a URL the guard refuses anyway: nothing to admit
            return False
        return self._admits(key, port or _DEFAULT_PORTS[scheme])

    def _admits(self, key: str, port: int) -> bool:
        return self.everything or (key, None) in self.hosts or (key, port) in self.hosts


NO_PRIVATE_HOSTS = PrivateHosts()


def _host_key(host: str) -> str:
    literal = _literal(host)
    return str(literal) if literal is not None else _normalise_name(host)


def _is_metadata_literal(key: str) -> bool:
    try:
        return is_metadata(parse_address(key))
    except MalformedAddressError:
        return False


def check(
    url: str, *, resolver: Resolver | None = None, private: PrivateHosts = NO_PRIVATE_HOSTS
) -> None:
    """Refuse `url` unless it is an http(s) URL whose host resolves only to public
    addresses, or only to non-metadata ones if `private` admits its host and port."""
    try:
        _check_parsed(url, resolver or system_resolver, private)
    except BlockedDestination:
        raise
    except Exception as exc:  # a guard that fails must fail closed
        raise _blocked(f"could not check the URL ({type(exc).__name__})") from exc


def _check_parsed(url: str, resolver: Resolver, private: PrivateHosts) -> None:
    scheme, host, port = _parts_of(url)
    allowed = private._admits(_host_key(host), port or _DEFAULT_PORTS[scheme])
    literal = _literal(host)
    if literal is not None:
        _check_ip(literal, host, private_ok=allowed)
        return
    _check_name(host, private_ok=allowed)
    _check_resolved(host, resolver, private_ok=allowed)


def check_address(ip: str, *, private_ok: bool = False) -> None:
    """Refuse a connection to `ip` (the address actually dialled) unless it is public,
    or, with `private_ok` (its host is an allowed private one), not a metadata service."""
    try:
        address = parse_address(ip)
    except MalformedAddressError as exc:
        raise _blocked(str(exc)) from exc
    except Exception as exc:  # any other failure is a refusal too
        raise _blocked("not an IP address") from exc
    _check_ip(address, ip, private_ok=private_ok)


def _check_ip(address: IPAddress, shown: str, *, private_ok: bool = False) -> None:
    if private_ok and not is_metadata(address):
        return
    reason = blocked_reason(address)
    if reason is not None:
        raise _blocked(f"{shown} is {reason}")


def _parts_of(url: str) -> tuple[str, str, int | None]:
    """The scheme, host (IPv6 in brackets) and explicit port of an acceptable URL."""
    if not isinstance(url, str):
        raise _blocked("the URL is not text")
    if len(url) > MAX_URL_LENGTH:
        raise _blocked("the URL is too long")
    if _FORBIDDEN_CHARS.search(url):
        # Parsers disagree on whitespace, control characters and backslashes.
        raise _blocked("the URL contains whitespace, control characters or a backslash")
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS:
        raise _blocked("only http and https URLs are allowed")
    if not url[len(parts.scheme) + 1 :].startswith("//") or not parts.netloc:
        raise _blocked("the URL has no host")
    if "@" in parts.netloc:
        raise _blocked("credentials (user@host) in a URL are not allowed")
    host, port = _split_netloc(parts.netloc)
    return parts.scheme, host, port


def _split_netloc(netloc: str) -> tuple[str, int | None]:
    if netloc.startswith("["):
        host, bracket, rest = netloc[1:].partition("]")
        if not bracket:
            raise _blocked("unbalanced brackets in the host")
        return f"[{host}]", _check_port(rest, required_colon=True)
    host, colon, port = netloc.rpartition(":")
    if not colon:
        return netloc, None
    return host, _check_port(":" + port, required_colon=True)


def _check_port(rest: str, *, required_colon: bool) -> int | None:
    if not rest:
        return None
    if required_colon and not rest.startswith(":"):
        raise _blocked("unexpected text after the host")
    port = rest[1:]
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise _blocked(f"invalid port {port!r}")
    return int(port) if port else None


def host_literal(host: str) -> IPAddress | None:
    """The IP address `host` spells (IPv6 in brackets, IPv4 in any notation, Unicode
    look-alike digits and a trailing dot as the guard reads them); None for a name.
    Raises `BlockedDestination` for a numeric host that is no address."""
    return _literal(host)


def _literal(host: str) -> IPAddress | None:
    """The IP address a host spells, in brackets or any IPv4 notation; None for names."""
    if host.startswith("["):
        try:
            return parse_address(host)
        except MalformedAddressError as exc:
            raise _blocked(str(exc)) from exc
    name = _normalise_name(host)
    try:
        address = parse_ipv4(name)
    except MalformedAddressError as exc:
        raise _blocked(str(exc)) from exc
    if address is None and _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        raise _blocked(f"{host!r} ends in a number but is not an IP address")
    return address


def _normalise_name(host: str) -> str:
    """Percent-decode, fold Unicode look-alikes, drop one trailing dot, apply IDNA."""
    name = unquote(host, errors="strict") if "%" in host else host
    name = _DOTS.sub(".", unicodedata.normalize("NFKC", name)).lower()
    if "%" in name or _HOST_FORBIDDEN.search(name):
        raise _blocked(f"{host!r} is not a valid host name")
    name = name[:-1] if name.endswith(".") else name
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise _blocked(f"{host!r} is not a valid international host name") from exc
    return name


def _check_name(host: str, *, private_ok: bool = False) -> None:
    name = _normalise_name(host)
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _blocked(f"{host!r} is not a valid host name")
    if any(label.startswith("xn--") for label in labels):
        try:
            name.encode("ascii").decode("idna")
        except UnicodeError as exc:
            raise _blocked(f"{host!r} holds an invalid IDNA label") from exc
    local = name in _BLOCKED_NAMES or name.endswith(_BLOCKED_SUFFIXES)
    if name in _METADATA_NAMES or (local and not private_ok):
        raise _blocked(f"{name} is a local or cloud-metadata host name")


def _check_resolved(host: str, resolver: Resolver, *, private_ok: bool = False) -> None:
    name = _normalise_name(host)
    try:
        answers = list(resolver(name))
    except Exception as exc:  # any resolver failure is a refusal, never a pass
        raise _blocked(f"could not resolve {name}", code=ErrorCode.DNS_FAILED) from exc
    if not answers:
        raise _blocked(f"{name} resolved to no address", code=ErrorCode.DNS_FAILED)
    for answer in answers:
        if not isinstance(answer, str):
            raise _blocked(f"{name} resolved to something that is not an address")
        try:
            address = parse_address(answer.split("%", 1)[0] if _is_v6(answer) else answer)
        except MalformedAddressError as exc:
            raise _blocked(f"{name} resolved to {answer!r}, not an address") from exc
        _check_ip(address, f"{name} resolves to {answer}, which", private_ok=private_ok)


def _is_v6(answer: str) -> bool:
    return ":" in answer
