"""`web_search`: a web search through the keyed provider chosen in settings (Brave,
Tavily, Serper or SearXNG), each over its documented HTTP API.

A missing key, a refused key, a rate limit or a bot-check page is a failure that names
the settings that fix it, never an empty success."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tool import Tool, ToolFailure

SETTINGS_HINT = (
    "set TETHER_RUNNER_SEARCH_PROVIDER to brave, tavily, serper or searxng and its "
    "TETHER_RUNNER_BRAVE_API_KEY / TETHER_RUNNER_TAVILY_API_KEY / "
    "TETHER_RUNNER_SERPER_API_KEY / TETHER_RUNNER_SEARXNG_URL"
)

WEB_SEARCH = ToolDescriptor(
    name="web_search",
    description=(
        "Searches the web and returns up to `count` results, each a title, URL and snippet. "
        "Use it to find pages about a question; then read the best ones with web_fetch. "
        "`query` is the search text (plain words, quotes for phrases); `count` is 1-10 "
        "(default 5). If no search provider is configured, or the provider refuses, the "
        "call fails (`search_unconfigured`, `search_refused`, `search_blocked`, "
        "`search_rate_limited`) naming the setting to fix; say so instead of guessing. "
        'Example: {"query": "python asyncio TaskGroup tutorial", "count": 5}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 400},
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    scope="read",
    reach="external",
    effect="network",
    idempotent=True,
    aliases=["search", "search_web", "internet_search", "google"],
    output_trust="untrusted",
)


@dataclass(frozen=True, slots=True)
class Hit:
    title: str
    url: str
    snippet: str


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    key_setting: str
    secret: str


def configured_provider(settings: RunnerSettings) -> Provider | None:
    secrets = {
        "brave": ("TETHER_RUNNER_BRAVE_API_KEY", settings.brave_api_key),
        "tavily": ("TETHER_RUNNER_TAVILY_API_KEY", settings.tavily_api_key),
        "serper": ("TETHER_RUNNER_SERPER_API_KEY", settings.serper_api_key),
        "searxng": ("TETHER_RUNNER_SEARXNG_URL", settings.searxng_url),
    }
    if settings.search_provider is None:
        return None
    setting, secret = secrets[settings.search_provider]
    return Provider(settings.search_provider, setting, secret) if secret else None


def _request(client: httpx.AsyncClient, p: Provider, query: str, count: int) -> httpx.Request:
    match p.name:
        case "brave":
            return client.build_request(
                "GET",
                "https://api.search.brave.com/res/v1/web/search",
                params={"q": query, "count": count},
                headers={"X-Subscription-Token": p.secret, "Accept": "application/json"},
            )
        case "tavily":
            return client.build_request(
                "POST",
                "https://api.tavily.com/search",
                json={"query": query, "max_results": count},
                headers={"Authorization": f"Bearer {p.secret}"},
            )
        case "serper":
            return client.build_request(
                "POST",
                "https://google.serper.dev/search",
                json={"q": query, "num": count},
                headers={"X-API-KEY": p.secret},
            )
    url = p.secret.rstrip("/") + "/search"
    return client.build_request("GET", url, params={"q": query, "format": "json"})


def _hits(provider: str, body: dict[str, Any]) -> list[Hit]:
    if provider == "brave":
        rows = body.get("web", {}).get("results", [])
        return [Hit(r.get("title", ""), r.get("url", ""), r.get("description", "")) for r in rows]
    if provider == "serper":
        rows = body.get("organic", [])
        return [Hit(r.get("title", ""), r.get("link", ""), r.get("snippet", "")) for r in rows]
    rows = body.get("results", [])  # tavily and searxng share this shape
    return [Hit(r.get("title", ""), r.get("url", ""), r.get("content", "")) for r in rows]


def _check_response(provider: Provider, response: httpx.Response) -> dict[str, Any]:
    where = f"{provider.name} ({provider.key_setting})"
    if response.status_code in {401, 402, 403}:
        raise ToolFailure(
            "search_refused",
            f"{where} refused the request (HTTP {response.status_code}); check that setting.",
        )
    if response.status_code == 429:
        raise ToolFailure("search_rate_limited", f"{where} is rate-limiting; try later.")
    if response.status_code >= 400:
        raise ToolFailure("search_failed", f"{where} answered HTTP {response.status_code}.")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ToolFailure(
            "search_blocked",
            f"{where} answered something that is not its JSON API (a bot check or a "
            "disabled JSON format); check that setting.",
        )
    return body


class WebSearchTool:
    def __init__(
        self, settings: RunnerSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.provider = configured_provider(settings)
        self.transport = transport

    async def run(self, args: dict[str, Any]) -> str:
        if self.provider is None:
            raise ToolFailure("search_unconfigured", f"no search provider: {SETTINGS_HINT}.")
        query, count = str(args["query"]), int(args.get("count", 5))
        async with httpx.AsyncClient(transport=self.transport, timeout=15.0) as client:
            try:
                response = await client.send(_request(client, self.provider, query, count))
            except httpx.HTTPError as exc:
                raise ToolFailure("search_failed", f"{self.provider.name}: {exc}.") from None
        hits = _hits(self.provider.name, _check_response(self.provider, response))[:count]
        if not hits:
            return f"{self.provider.name} found no results for {query!r}."
        return "\n\n".join(
            f"{n}. {h.title}\n   {h.url}\n   {h.snippet}" for n, h in enumerate(hits, 1)
        )


def web_search_tools(
    settings: RunnerSettings, transport: httpx.AsyncBaseTransport | None = None
) -> list[Tool]:
    tool = WebSearchTool(settings, transport)
    descriptor = WEB_SEARCH.model_copy(update={"available": tool.provider is not None})
    return [Tool(descriptor, tool.run)]


__all__ = ["WEB_SEARCH", "web_search_tools"]
