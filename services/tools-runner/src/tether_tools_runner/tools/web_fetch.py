"""`web_fetch`: one public web page as readable text, through the guarded `Fetcher`."""

from __future__ import annotations

import asyncio
import json
import re
from html.parser import HTMLParser
from typing import Any

import httpx

from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.fetch import Fetcher, Page
from tether_tools_runner.tool import Tool, ToolFailure

MAX_TEXT = 50_000

WEB_FETCH = ToolDescriptor(
    name="web_fetch",
    description=(
        "Downloads one public web page (http or https) and returns its readable text: the "
        "main article for HTML, the body as-is for plain text and JSON. Use it to read a "
        "page whose URL you already have (from the user or from web_search); it does not "
        "search. `url` must be a full http(s) URL. Private, loopback, link-local and cloud "
        "metadata addresses are refused with `blocked_destination`, also when a redirect "
        "or a DNS answer points there; at most 5 redirects; pages over 2 MB are cut and "
        "marked truncated; images and other binary types fail with `unsupported_content`. "
        'Example: {"url": "https://docs.python.org/3/library/asyncio.html"}.'
    ),
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string", "minLength": 8, "maxLength": 8192}},
        "required": ["url"],
        "additionalProperties": False,
    },
    scope="read",
    reach="external",
    effect="network",
    idempotent=True,
    aliases=["fetch", "fetch_url", "open_url", "browse", "get_url"],
    output_trust="untrusted",
)


class _TextParser(HTMLParser):
    """The fallback when trafilatura finds no article: visible text, scripts dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style", "noscript", "template"}:
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style", "noscript", "template"} and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def html_to_text(markup: str) -> str:
    # Imported on the first page read, not at start: trafilatura compiles its XPath
    # expressions on import (a fifth of the runner's start-up).
    import trafilatura

    extracted = trafilatura.extract(markup, include_links=False, include_tables=True)
    if extracted and extracted.strip():
        return str(extracted)
    return visible_text(markup)


def visible_text(markup: str) -> str:
    """Every visible text node, one per line; the parser has already decoded entities."""
    parser = _TextParser()
    parser.feed(markup)
    return "\n".join(parser.parts)


def _charset(content_type: str) -> str:
    match = re.search(r"charset=([\w-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else "utf-8"


async def readable(page: Page) -> str:
    kind = page.content_type.split(";", 1)[0].strip().lower()
    try:
        text = page.body.decode(_charset(page.content_type), errors="replace")
    except LookupError:
        text = page.body.decode("utf-8", errors="replace")
    if kind in {"text/html", "application/xhtml+xml"} or (not kind and "<html" in text[:500]):
        return await asyncio.to_thread(html_to_text, text)
    if kind == "application/json" or kind.endswith("+json"):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    if kind.startswith("text/") or kind in {"application/xml", "application/javascript", ""}:
        return text
    raise ToolFailure("unsupported_content", f"{page.url} is {kind}, not text.")


class WebFetchTool:
    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher

    async def run(self, args: dict[str, Any]) -> str:
        try:
            page = await self.fetcher.fetch(str(args["url"]))
        except httpx.HTTPError as exc:
            raise ToolFailure("fetch_failed", f"{type(exc).__name__}: {exc}.") from None
        except TimeoutError:
            raise ToolFailure(
                "timeout", f"no complete answer within {self.fetcher.timeout_s:g}s."
            ) from None
        if page.status >= 400:
            raise ToolFailure("http_error", f"{page.url} answered HTTP {page.status}.")
        text = await readable(page)
        notes = " (truncated at the size cap)" if page.truncated else ""
        if len(text) > MAX_TEXT:
            text, notes = text[:MAX_TEXT], notes + f" (text cut at {MAX_TEXT} characters)"
        return f"URL: {page.url}\nStatus: {page.status}{notes}\n\n{text}"


def web_fetch_tools(fetcher: Fetcher) -> list[Tool]:
    return [Tool(WEB_FETCH, WebFetchTool(fetcher).run)]


__all__ = ["WEB_FETCH", "html_to_text", "visible_text", "web_fetch_tools"]
