"""`web_search`: each provider spoken to over its documented HTTP API (against a mock
transport), and every refusal a failure naming the setting that fixes it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tool import Registry
from tether_tools_runner.tools.web_search import web_search_tools

Call = Callable[..., Awaitable[ToolResult]]
Handler = Callable[[httpx.Request], httpx.Response]


def searcher(handler: Handler, **settings: Any) -> Executor:
    tools = web_search_tools(RunnerSettings(**settings), httpx.MockTransport(handler))
    return Executor(Registry(tools), default_timeout_s=5)


def never(request: httpx.Request) -> httpx.Response:
    raise AssertionError("no provider should be called")


async def test_unconfigured_search_fails_naming_the_settings(call: Call) -> None:
    executor = searcher(never)
    tool = executor.registry.get("web_search")
    assert tool is not None
    assert tool.descriptor.available is False
    result = await call(executor, "web_search", {"query": "x"})
    assert result.error_code == "search_unconfigured"
    assert "TETHER_RUNNER_SEARCH_PROVIDER" in result.content
    keyless = searcher(never, search_provider="brave")
    assert (await call(keyless, "web_search", {"query": "x"})).error_code == "search_unconfigured"


PROVIDERS: list[tuple[str, dict[str, Any], str, str, dict[str, Any]]] = [
    (
        "brave",
        {"brave_api_key": "bk"},
        "https://api.search.brave.com/res/v1/web/search?q=tides&count=2",
        "x-subscription-token",
        {"web": {"results": [{"title": "T", "url": "https://a", "description": "S"}]}},
    ),
    (
        "tavily",
        {"tavily_api_key": "tk"},
        "https://api.tavily.com/search",
        "authorization",
        {"results": [{"title": "T", "url": "https://a", "content": "S"}]},
    ),
    (
        "serper",
        {"serper_api_key": "sk"},
        "https://google.serper.dev/search",
        "x-api-key",
        {"organic": [{"title": "T", "link": "https://a", "snippet": "S"}]},
    ),
    (
        "searxng",
        {"searxng_url": "https://searx.example/"},
        "https://searx.example/search?q=tides&format=json",
        "",
        {"results": [{"title": "T", "url": "https://a", "content": "S"}]},
    ),
]


@pytest.mark.parametrize(("provider", "keys", "url", "header", "body"), PROVIDERS)
async def test_each_provider_speaks_its_api(
    call: Call, provider: str, keys: dict[str, Any], url: str, header: str, body: dict[str, Any]
) -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json=body)

    executor = searcher(handler, search_provider=provider, **keys)
    result = await call(executor, "web_search", {"query": "tides", "count": 2})
    assert result.ok, result.content
    assert result.content == "1. T\n   https://a\n   S"
    assert str(requests[0].url) == url
    if header:
        assert requests[0].headers[header]
    if requests[0].method == "POST":
        assert "tides" in json.loads(requests[0].content).values()


@pytest.mark.parametrize(
    ("response", "code"),
    [
        (httpx.Response(401, json={"error": "bad key"}), "search_refused"),
        (httpx.Response(403, text="forbidden"), "search_refused"),
        (httpx.Response(429, json={}), "search_rate_limited"),
        (httpx.Response(200, text="<html>Are you a robot?</html>"), "search_blocked"),
        (httpx.Response(500, text="oops"), "search_failed"),
    ],
)
async def test_refusals_name_the_setting(call: Call, response: httpx.Response, code: str) -> None:
    executor = searcher(lambda request: response, search_provider="tavily", tavily_api_key="tk")
    result = await call(executor, "web_search", {"query": "tides"})
    assert result.error_code == code
    if code != "search_failed":
        assert "TETHER_RUNNER_TAVILY_API_KEY" in result.content


async def test_no_results_is_said_plainly(call: Call) -> None:
    executor = searcher(
        lambda request: httpx.Response(200, json={"organic": []}),
        search_provider="serper",
        serper_api_key="sk",
    )
    result = await call(executor, "web_search", {"query": "zzzz"})
    assert result.ok
    assert "found no results" in result.content
