"""Pinning a checked URL to the address that was checked, so the connection goes there.

A guard that checks a name and then lets the HTTP client resolve it again can be
answered twice by DNS (rebinding): public at the check, loopback at the connect. `pin`
resolves once, checks every answer with the caller's `check_address`, and gives the URL
with the first answer in place of the host, the `Host` header the server expects, and
the TLS server name (SNI and certificate check) for https. Callers send exactly that
(`Pinned.url`, `Pinned.headers`, `Pinned.extensions` with httpx), and follow no
redirect they have not pinned the same way. Pure: the resolver is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from tether_common.errors import BlockedDestination, ErrorCode

from .urls import host_literal

__all__ = ["Pinned", "pin"]

AddressCheck = Callable[[str], None]
"""Raises `BlockedDestination` for an address that may not be dialled."""


@dataclass(frozen=True, slots=True)
class Pinned:
    """Where to connect for a URL: `url` holds the checked address instead of the host."""

    url: str
    address: str
    host_header: str
    server_name: str | None  # https: the name the certificate must carry

    @property
    def headers(self) -> dict[str, str]:
        return {"Host": self.host_header}

    @property
    def extensions(self) -> dict[str, str]:
        """httpx request extensions: the TLS server name for an https URL."""
        return {} if self.server_name is None else {"sni_hostname": self.server_name}


def pin(url: str, resolve: Callable[[str], Sequence[str]], check_address: AddressCheck) -> Pinned:
    """Resolve `url`'s host once, check every answer, and pin the first; raises
    `BlockedDestination` (`dns_failed` when the name does not resolve). The URL itself
    must have passed the URL guard already (scheme, credentials, host shape)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    answers = [answer.split("%", 1)[0] for answer in _answers(host, resolve)]
    if not answers:
        raise BlockedDestination(f"{host} resolved to no address", code=ErrorCode.DNS_FAILED)
    for answer in answers:
        check_address(answer)
    address = answers[0]
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    server_name = host if parts.scheme == "https" else None
    return Pinned(pinned, address, parts.netloc, server_name)


def _answers(host: str, resolve: Callable[[str], Sequence[str]]) -> list[str]:
    """The host's addresses: a literal in any spelling is itself, a name is resolved."""
    literal = host_literal(f"[{host}]" if ":" in host else host)
    if literal is not None:
        return [str(literal)]
    try:
        return [str(answer) for answer in resolve(host)]
    except Exception as exc:  # any resolver failure is a refusal, never a pass
        raise BlockedDestination(f"could not resolve {host}", code=ErrorCode.DNS_FAILED) from exc
