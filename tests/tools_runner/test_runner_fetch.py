"""`web_fetch`: readable text from a real local HTTP server (reached through a guard the
test builds explicitly), and the real guard refusing loopback, metadata, private
redirects, names resolving to loopback and DNS answers that change at connect time."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import pytest

from tether_common.messages.tools import ToolResult
from tether_common.safety import check_address
from tether_tools_runner.executor import Executor
from tether_tools_runner.fetch import Fetcher, PublicGuard
from tether_tools_runner.tools.web_fetch import visible_text

Call = Callable[..., Awaitable[ToolResult]]
MakeExecutor = Callable[..., Executor]

ARTICLE = (
    "<html><head><title>Tides</title><script>var tracking = 1;</script></head><body>"
    "<nav>Home | About</nav><article><h1>How tides work</h1>"
    + "<p>The moon pulls the oceans, and the earth turns beneath the bulge. " * 8
    + "</p></article><footer>(c) nobody</footer></body></html>"
)
ROUTES: dict[str, tuple[int, dict[str, str], bytes]] = {
    "/article": (200, {"Content-Type": "text/html; charset=utf-8"}, ARTICLE.encode()),
    "/plain": (200, {"Content-Type": "text/plain"}, b"just text"),
    "/json": (200, {"Content-Type": "application/json"}, b'{"a": [1, 2]}'),
    "/image": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n"),
    "/big": (200, {"Content-Type": "text/plain"}, b"x" * 3_000_000),
    "/missing": (404, {"Content-Type": "text/plain"}, b"no"),
    "/hop": (302, {"Location": "/article"}, b""),
    "/loop": (302, {"Location": "/loop"}, b""),
    "/to-metadata": (302, {"Location": "http://169.254.169.254/latest/meta-data/"}, b""),
    "/to-private": (301, {"Location": "http://10.1.2.3/admin"}, b""),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(3)
        status, headers, body = ROUTES.get(self.path, (200, {}, b"slow"))
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"site.test:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


class LocalGuard:
    """The test server's name and address are allowed; everything else meets the real guard."""

    def __init__(self) -> None:
        self.real = PublicGuard(resolver=lambda host: ["93.184.216.34"])

    def check_url(self, url: str) -> None:
        if urlsplit(url).hostname != "site.test":
            self.real.check_url(url)

    def check_address(self, ip: str) -> None:
        if ip != "127.0.0.1":
            check_address(ip)

    def resolve(self, host: str) -> Sequence[str]:
        return ["127.0.0.1"] if host == "site.test" else self.real.resolve(host)


@pytest.fixture
def local(make_executor: MakeExecutor) -> Executor:
    return make_executor(fetcher=Fetcher(LocalGuard(), max_bytes=2_000_000, timeout_s=2))


async def test_html_becomes_readable_text(local: Executor, call: Call, server: str) -> None:
    result = await call(local, "web_fetch", {"url": f"http://{server}/hop"})
    assert result.ok, result.content
    assert result.content.startswith(f"URL: http://{server}/article\nStatus: 200")
    assert "The moon pulls the oceans" in result.content
    assert "tracking" not in result.content
    assert "Home | About" not in result.content


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/plain", "just text"), ("/json", '"a": [\n    1,'), ("/big", "(truncated at the size cap)")],
)
async def test_text_kinds_and_size_cap(
    local: Executor, call: Call, server: str, path: str, expected: str
) -> None:
    result = await call(local, "web_fetch", {"url": f"http://{server}{path}"})
    assert result.ok
    assert expected in result.content


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/image", "unsupported_content"),
        ("/missing", "http_error"),
        ("/loop", "too_many_redirects"),
        ("/to-metadata", "blocked_destination"),
        ("/to-private", "blocked_destination"),
        ("/slow", "timeout"),
    ],
)
async def test_failures_are_coded(
    local: Executor, call: Call, server: str, path: str, code: str
) -> None:
    result = await call(local, "web_fetch", {"url": f"http://{server}{path}"})
    assert result.error_code == code, result.content


def public_fetcher(
    resolver: Callable[[str], Sequence[str]], handler: Callable[..., httpx.Response]
) -> Fetcher:
    return Fetcher(PublicGuard(resolver), transport=httpx.MockTransport(handler), timeout_s=2)


def never(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the guard let {request.url} through")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://localhost:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://2130706433/",
        "http://10.0.0.1/",
        "http://loopback.test/",
        "ftp://example.com/file",
        "file:///etc/passwd",
    ],
)
async def test_the_real_guard_refuses(make_executor: MakeExecutor, call: Call, url: str) -> None:
    resolver = {"loopback.test": ["127.0.0.1"]}.get
    executor = make_executor(fetcher=public_fetcher(lambda h: resolver(h) or [], never))
    result = await call(executor, "web_fetch", {"url": url})
    assert result.error_code in {"blocked_destination", "dns_failed"}, result.content


async def test_requests_are_pinned_and_redirects_rechecked(
    make_executor: MakeExecutor, call: Call
) -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers["host"]))
        return httpx.Response(302, headers={"Location": "http://internal.test/secrets"})

    names = {"public.test": ["93.184.216.34"], "internal.test": ["192.168.1.10"]}
    executor = make_executor(fetcher=public_fetcher(lambda h: names[h], handler))
    result = await call(executor, "web_fetch", {"url": "http://public.test/start"})
    assert result.error_code == "blocked_destination"
    assert seen == [("http://93.184.216.34/start", "public.test")]


async def test_dns_rebinding_is_caught_at_connect_time(
    make_executor: MakeExecutor, call: Call
) -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])
    executor = make_executor(fetcher=public_fetcher(lambda h: next(answers), never))
    result = await call(executor, "web_fetch", {"url": "http://rebind.test/"})
    assert result.error_code == "blocked_destination"
    assert "127.0.0.1" in result.content


async def test_https_is_pinned_with_the_original_name_for_tls(
    make_executor: MakeExecutor, call: Call
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok", headers={"Content-Type": "text/plain"})

    names = {"public.test": ["2606:4700::1111"]}
    executor = make_executor(fetcher=public_fetcher(lambda h: names[h], handler))
    result = await call(executor, "web_fetch", {"url": "https://public.test:8443/a?b=1"})
    assert result.ok, result.content
    assert str(seen[0].url) == "https://[2606:4700::1111]:8443/a?b=1"
    assert seen[0].headers["host"] == "public.test:8443"
    assert seen[0].extensions["sni_hostname"] == "public.test"


def test_plain_fallback_when_there_is_no_article() -> None:
    markup = (
        "<html><body><p>Hi &amp;lt; bye</p><script>x = 1</script><style>p {}</style></body></html>"
    )
    assert visible_text(markup) == "Hi &lt; bye"
