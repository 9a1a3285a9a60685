"""Fetching one URL safely: the URL guard before every hop, the dialled address pinned
to the one that was checked, redirects followed by hand, size and time caps.

Pinning (`tether_common.safety.pinning`): the host is resolved once, every answer is
checked, and the request goes to the checked IP literal with the original `Host` header
(and TLS SNI / certificate name via httpx's `sni_hostname` extension), so DNS cannot
answer differently at connect time.
The guard is a Protocol so tests can point the fetcher at a local server explicitly."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urljoin

import httpx

from tether_common.errors import BlockedDestination
from tether_common.safety import Resolver, check, check_address, system_resolver
from tether_common.safety.pinning import pin
from tether_tools_runner.tool import ToolFailure

MAX_REDIRECTS = 5
USER_AGENT = "TetherFetch/0.1 (+https://github.com/tether)"


class Guard(Protocol):
    def check_url(self, url: str) -> None: ...
    def check_address(self, ip: str) -> None: ...
    def resolve(self, host: str) -> Sequence[str]: ...


class PublicGuard:
    """The real guard: `safety.urls.check` and `check_address`, with a resolver hook."""

    def __init__(self, resolver: Resolver = system_resolver) -> None:
        self.resolver = resolver

    def check_url(self, url: str) -> None:
        check(url, resolver=self.resolver)

    def check_address(self, ip: str) -> None:
        check_address(ip)

    def resolve(self, host: str) -> Sequence[str]:
        return self.resolver(host)


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool


class Fetcher:
    def __init__(
        self,
        guard: Guard,
        *,
        max_bytes: int = 2_000_000,
        timeout_s: float = 20.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.guard = guard
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.transport = transport

    async def fetch(self, url: str) -> Page:
        """GET `url`, following at most five redirects, each hop checked again."""
        timeout = httpx.Timeout(self.timeout_s)
        async with (
            asyncio.timeout(self.timeout_s),
            httpx.AsyncClient(
                transport=self.transport, timeout=timeout, follow_redirects=False, trust_env=False
            ) as client,
        ):
            for _ in range(MAX_REDIRECTS + 1):
                page, location = await self._hop(client, url)
                if location is None:
                    return page
                url = urljoin(url, location)
        raise ToolFailure("too_many_redirects", f"more than {MAX_REDIRECTS} redirects.")

    async def _hop(self, client: httpx.AsyncClient, url: str) -> tuple[Page, str | None]:
        request = await self._pinned_request(client, url)
        response = await client.send(request, stream=True)
        try:
            location = response.headers.get("location")
            if response.is_redirect and location:
                return Page(url, response.status_code, "", b"", False), location
            body, truncated = await self._read(response)
            content_type = response.headers.get("content-type", "")
            return Page(url, response.status_code, content_type, body, truncated), None
        finally:
            await response.aclose()

    async def _pinned_request(self, client: httpx.AsyncClient, url: str) -> httpx.Request:
        try:
            await asyncio.to_thread(self.guard.check_url, url)
            pinned = await asyncio.to_thread(pin, url, self.guard.resolve, self.guard.check_address)
        except BlockedDestination as exc:
            raise ToolFailure(exc.code, f"{url} is refused: {exc.message}.") from None
        headers = pinned.headers | {"User-Agent": USER_AGENT, "Accept": "text/html, */*"}
        return client.build_request(
            "GET", pinned.url, headers=headers, extensions=pinned.extensions
        )

    async def _read(self, response: httpx.Response) -> tuple[bytes, bool]:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                return bytes(body[: self.max_bytes]), True
        return bytes(body), False


__all__ = ["Fetcher", "Guard", "Page", "PublicGuard"]
