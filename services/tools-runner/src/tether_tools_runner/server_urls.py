"""Where a tenant's MCP server may be reached: the shared URL guard
(`tether_common.safety.urls`) with the private hosts the deployment allows
(`TETHER_RUNNER_TOOL_SERVER_PRIVATE_HOSTS`, none by default), judged as written when the
server is added and again, on the address actually dialled, at every request
(`tether_common.safety.pinning`), as the webhooks and `web_fetch` do.

Adding resolves nothing (a refusal then tells a tenant nothing about the runner's
network); each request resolves the host once, checks every answer and connects to the
checked one, so DNS cannot answer differently in between (rebinding), and a redirect the
SDK follows (same origin only) is pinned the same way. Plain http is allowed only to an
allowed private host: a credential never crosses the internet in clear."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from urllib.parse import urlsplit

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client

from tether_common.errors import AuthError, BlockedDestination, ErrorCode, MessageError, TetherError
from tether_common.safety import Resolver, check, check_address, system_resolver
from tether_common.safety.pinning import Pinned, pin
from tether_common.safety.urls import PrivateHosts

__all__ = ["PinnedTransport", "ServerDestinations", "pinned_http"]

HINT = (
    "; a loopback or private server must be named by the deployment "
    "(TETHER_RUNNER_TOOL_SERVER_PRIVATE_HOSTS)"
)
CONNECT_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 300.0  # a server may hold its event stream open


def _unresolved(host: str) -> list[str]:
    """Adding resolves nothing: a name is judged at each connection."""
    raise LookupError(host)


class ServerDestinations:
    def __init__(self, private: PrivateHosts, resolver: Resolver = system_resolver) -> None:
        self.private = private
        self.resolver = resolver

    def registered(self, url: str) -> str:
        """The URL as given, or 422 `tool_server_refused` saying why."""
        try:
            self._as_written(url)
        except BlockedDestination as exc:
            raise MessageError(exc.message + HINT, code=ErrorCode.TOOL_SERVER_REFUSED) from None
        if urlsplit(url).scheme != "https" and not self.private.admits(url):
            raise MessageError(
                "a tool server is reached over https (plain http only to an allowed private "
                "host, so credentials never travel in clear)" + HINT,
                code=ErrorCode.TOOL_SERVER_REFUSED,
            )
        return url

    def pinned(self, url: str) -> Pinned:
        """Where to send a request now; `BlockedDestination` when its URL or any address
        its host resolves to is refused (the settings of this moment apply)."""
        self._as_written(url)
        allowed = self.private.admits(url)
        return pin(url, self.resolver, partial(check_address, private_ok=allowed))

    def _as_written(self, url: str) -> None:
        try:
            check(url, resolver=_unresolved, private=self.private)
        except BlockedDestination as exc:
            if exc.code != ErrorCode.DNS_FAILED:  # only a name left to resolve passes
                raise


class PinnedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that sends each request to the address its URL was checked
    at (the `Host` header and TLS name kept), refusing a destination the guard refuses."""

    def __init__(self, destinations: ServerDestinations) -> None:
        self.destinations = destinations
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        # The last answer that was not a success, to say why a connection failed (the
        # SDK's own error says only that the server answered an error).
        self.refused: httpx2.Response | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        pinned = await asyncio.to_thread(self.destinations.pinned, str(request.url))
        request.url = httpx2.URL(pinned.url)
        request.headers["Host"] = pinned.host_header
        request.extensions = {**request.extensions, **pinned.extensions}
        response = await self._inner.handle_async_request(request)
        if response.status_code >= 300:
            self.refused = response
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def pinned_http(
    url: str, headers: dict[str, str], destinations: ServerDestinations
) -> AsyncIterator[TransportStreams]:
    """An MCP streamable-HTTP connection to `url` through the pinned transport, sending
    `headers` (the server's credentials) on every request to it and nowhere else: the
    SDK follows no redirect off the server's origin."""
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
    transport = PinnedTransport(destinations)
    client = httpx2.AsyncClient(
        transport=transport,
        headers=headers,
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        try:
            yield streams
        except Exception as exc:
            if transport.refused is None:
                raise
            raise _refusal(transport.refused) from exc


def _refusal(response: httpx2.Response) -> TetherError:
    """Why the server would not serve us, in words (its status; never our headers)."""
    status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    if response.status_code in (401, 403):
        return AuthError(f"the server refused the credentials ({status})")
    if 300 <= response.status_code < 400:
        return TetherError(f"the server redirected ({status}); a redirect is not followed")
    return TetherError(f"the server answered {status}")
