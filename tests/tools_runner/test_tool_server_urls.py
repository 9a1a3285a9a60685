"""Where a tenant's MCP server may be (`tether_tools_runner.server_urls`): the URL as
written when it is added, and every address a request would dial (DNS rebinding), with
only the deployment's named private hosts allowed."""

from __future__ import annotations

from collections.abc import Sequence

import httpx2
import pytest

from tether_common.errors import BlockedDestination, ErrorCode, MessageError
from tether_common.safety.urls import PrivateHosts
from tether_tools_runner.server_urls import PinnedTransport, ServerDestinations

ANSWERS = {
    "rebind.example": ["127.0.0.1"],
    "mixed.example": ["93.184.216.34", "10.0.0.7"],
    "meta.example": ["169.254.169.254"],
    "v6loop.example": ["::1"],
    "public.example": ["93.184.216.34"],
}


def resolve(host: str) -> Sequence[str]:
    return ANSWERS[host]


def destinations(*private: str) -> ServerDestinations:
    return ServerDestinations(PrivateHosts.of(private), resolver=resolve)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/mcp",
        "https://127.0.0.1/mcp",
        "https://[::1]/mcp",
        "https://[::ffff:127.0.0.1]/mcp",
        "https://2130706433/mcp",
        "https://0177.0.0.1/mcp",
        "https://169.254.169.254/latest/meta-data",
        "https://10.1.2.3/mcp",
        "https://192.168.1.1/mcp",
        "https://[fd00::1]/mcp",
        "https://localhost/mcp",
        "https://metadata.google.internal/",
        "https://user:pass@public.example/mcp",
        "ftp://public.example/mcp",
        "http://public.example/mcp",  # plain http to a public host: credentials in clear
        "http://127.0.0.1:9/mcp",  # loopback, but not the allowed port
    ],
)
def test_refused_when_added(url: str) -> None:
    with pytest.raises(MessageError) as caught:
        destinations("127.0.0.1:8443").registered(url)
    assert caught.value.code == ErrorCode.TOOL_SERVER_REFUSED


@pytest.mark.parametrize(
    "url", ["https://public.example/mcp", "https://rebind.example/mcp", "http://127.0.0.1:8443/"]
)
def test_accepted_when_added(url: str) -> None:
    """A name is judged when it is dialled; the allowed private host:port is accepted."""
    assert destinations("127.0.0.1:8443").registered(url) == url


@pytest.mark.parametrize(
    "host", ["rebind.example", "mixed.example", "meta.example", "v6loop.example"]
)
async def test_a_name_resolving_to_a_refused_address_is_never_dialled(host: str) -> None:
    transport = PinnedTransport(destinations("127.0.0.1:8443"))
    request = httpx2.Request("POST", f"https://{host}/mcp", headers={"Authorization": "x"})
    with pytest.raises(BlockedDestination):
        await transport.handle_async_request(request)
    await transport.aclose()


def test_a_request_is_pinned_to_the_checked_address_with_its_name_kept() -> None:
    pinned = destinations().pinned("https://public.example/mcp?x=1")
    assert pinned.url == "https://93.184.216.34/mcp?x=1"
    assert pinned.headers == {"Host": "public.example"}
    assert pinned.extensions == {"sni_hostname": "public.example"}


def test_an_allowed_private_host_is_never_a_metadata_service() -> None:
    with pytest.raises(ValueError, match="metadata"):
        PrivateHosts.of(["169.254.169.254"])
