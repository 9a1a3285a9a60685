"""Offering many tools well: when more than `CONNECTOR_LIMIT` connector tools (MCP servers
and other per-service tools, named `mcp.<service>.<tool>` or `<service>.<…>`) are available,
only the services the question or the recent messages point at are offered; the others are
named in one line. Built-in tools are never hidden then, and a hidden tool still runs when
the model names it (the gates see the whole catalogue).

The compact prompt tier (small models) narrows further, by the user's request alone so the
offer stays the same from step to step: built-in tools only when the request has words
that plausibly need them (`BUILTIN_KEYWORDS`), connector tools only for the services it
names."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tether_brain.context.cards import compact_card
from tether_common.messages.gateway import OfferedToolSpec
from tether_common.messages.tools import ToolDescriptor

CONNECTOR_LIMIT = 8
RECENT_MESSAGES = 6

DEFAULT_KEYWORDS: dict[str, list[str]] = {
    "mail": ["inbox", "email", "e-mail", "mail", "unread"],
    "gmail": ["inbox", "email", "gmail"],
    "github": ["issue", "pull request", "repository", "repo", "commit", "github"],
    "gitlab": ["issue", "merge request", "repository", "gitlab"],
    "dns": ["dns", "domain", "record", "nameserver"],
    "cloudflare": ["dns", "domain", "cloudflare"],
    "calendar": ["meeting", "calendar", "schedule", "event"],
    "slack": ["slack", "channel", "message"],
    "jira": ["ticket", "jira", "sprint"],
    "drive": ["document", "drive", "folder", "file share"],
}


# The words (or patterns) of a request that plausibly need each built-in tool. A small
# model offered every tool picks wrong ones and copies names from the list.
BUILTIN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "current_time": ("time", "clock", "date", "today", "day", "now", "hour", "timezone"),
    "convert_time": ("convert", "timezone", "time zone", "when it is", "when it's"),
    "calculate": (
        "calculate", "compute", "sum", "total", "percent", "percentage", "average", "plus",
        "minus", "times", "multiply", "multiplied", "divide", "divided", "square root",
        "sqrt", "how much", "how many", "math", "power", "squared", "cubed",
    ),
    "file_read": ("read", "file", "contents", "content", "open", "config", "value", "line"),
    "file_list": ("list", "files", "folder", "folders", "directory", "workspace", "ls"),
    "file_search": (
        "search", "find", "grep", "contain", "contains", "mention", "mentions", "where",
    ),
    "file_write": ("write", "create", "save", "append", "new file"),
    "file_edit": ("edit", "change", "replace", "update", "fix", "modify", "rename"),
    "shell": (
        "run", "command", "shell", "execute", "terminal", "script", "git", "python", "pip",
        "install", "test", "tests", "disk", "process",
    ),
    "web_fetch": ("http", "https", "url", "fetch", "page", "website", "download", "link"),
    "web_search": (
        "web", "online", "internet", "google", "look up", "latest", "news", "weather",
        "price", "stock",
    ),
    "run_agent": ("helper", "helpers", "agent", "agents", "delegate", "in parallel"),
    "load_skill": ("skill", "skills"),
    "memory_save": ("remember", "memorize", "memorise", "don't forget", "keep in mind"),
    "memory_search": (
        "remember", "recall", "last time", "previously", "preference", "preferences", "memory",
    ),
}  # fmt: skip
BUILTIN_PATTERNS: dict[str, re.Pattern[str]] = {
    "calculate": re.compile(r"\d\s*[-+*/^×x]\s*\(?\d|\d\s*%"),
    "convert_time": re.compile(r"\b\d{1,2}(:\d{2})?\s*(am|pm)\b|\b\d{1,2}:\d{2}\b"),
    "file_read": re.compile(
        r"[\w/-]\.(txt|md|json|ya?ml|toml|ini|cfg|conf|csv|py|js|ts|log|html|xml|sh)\b"
    ),
    "web_fetch": re.compile(r"https?://"),
}
# Words that name what one tool does, not just what it works on: "Which file in the notes
# folder mentions the whale?" fits the reader ("file") and the lister ("folder") too, but
# asks for a search. A tool a request names this way is offered before the others (a small
# model tends to take the first card: it listed the folder and answered the first name).
BUILTIN_VERBS: dict[str, tuple[str, ...]] = {
    "file_list": ("list", "ls"),
    "file_search": ("search", "find", "grep", "contain", "contains", "mention", "mentions"),
    "file_write": ("write", "create", "save", "append", "new file"),
    "file_edit": ("edit", "change", "replace", "modify", "rename"),
    "shell": ("run", "command", "shell", "execute", "terminal"),
    "web_fetch": ("fetch", "download"),
    "web_search": ("look up", "search the web", "online", "internet"),
}
# A tool that refuses to work before another has run (`file_edit` a file not read in the
# run) is offered after that one.
NEEDS_FIRST: dict[str, str] = {"file_edit": "file_read"}
# Tools offered when earlier messages (not the request) point at them: a large result's
# digest names `retrieve_output`.
FOLLOW_UP_TOOLS = ("retrieve_output",)


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


@dataclass(frozen=True, slots=True)
class Offer:
    tools: list[ToolDescriptor]
    hidden_services: list[str]

    def note(self) -> str | None:
        if not self.hidden_services:
            return None
        return (
            "Other connected services (their tools are not listed; name the service to use "
            "it): " + ", ".join(self.hidden_services) + "."
        )


def service_of(name: str) -> str | None:
    """The connector service of a tool name, or None for a built-in tool."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    return parts[1] if parts[0] == "mcp" and len(parts) > 2 else parts[0]


def _mentions(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word.lower())}(?!\w)", text) is not None


def choose(
    tools: Sequence[ToolDescriptor], recent: str, keywords: Mapping[str, Sequence[str]]
) -> Offer:
    connectors = [t for t in tools if service_of(t.name) is not None]
    if len(connectors) <= CONNECTOR_LIMIT:
        return Offer(list(tools), [])
    text = recent.lower()
    services = sorted({s for t in connectors if (s := service_of(t.name)) is not None})
    wanted = {
        s
        for s in services
        if _mentions(text, s) or any(_mentions(text, k) for k in keywords.get(s, ()))
    }
    offered = [t for t in tools if service_of(t.name) in (None, *wanted)]
    return Offer(offered, [s for s in services if s not in wanted])


def compact_offer(
    specs: Sequence[OfferedToolSpec],
    request: str | None,
    recent: str,
    keywords: Mapping[str, Sequence[str]],
) -> tuple[list[OfferedToolSpec], str | None]:
    """The compact tier's tools as one-line cards, and the note naming left-out services;
    with no request to narrow by, every tool."""
    if request is None:
        return [compact_card(s) for s in specs], None
    chosen, hidden = choose_compact(specs, request, recent, keywords)
    return [compact_card(s) for s in chosen], Offer([], hidden).note()


def choose_compact(
    tools: Sequence[T], request: str, recent: str, keywords: Mapping[str, Sequence[str]]
) -> tuple[list[T], list[str]]:
    """The compact tier's offer: (tools the request plausibly needs, services left out)."""
    text = request.lower()
    services = sorted({s for t in tools if (s := service_of(t.name)) is not None})
    wanted = {
        s
        for s in services
        if _mentions(text, s) or any(_mentions(text, k) for k in keywords.get(s, ()))
    }
    offered = [
        t
        for t in tools
        if (service_of(t.name) in wanted)
        or (service_of(t.name) is None and _needed(t.name, text, recent.lower()))
    ]
    offered.sort(key=offer_rank(text))
    return offered, [s for s in services if s not in wanted]


def offer_rank(request: str) -> Callable[[Named], tuple[bool, bool, bool]]:
    """The order of the compact offer (a small model tends to take the first card): a tool
    the request names by what it does ("replace", "run", "mentions") leads, after what it
    needs first (an edit needs the file read); then a tool the request holds a value for
    (a clock time, a file name, a sum: "time" in "when it is 09:00 in London, what time is
    it in Tokyo?" also fits the clock); then the rest in the catalogue's order (the sort
    is stable). It depends on the request alone, so it is the same at every step and the
    cached prefix holds."""
    named = {
        name for name, verbs in BUILTIN_VERBS.items() if any(_mentions(request, v) for v in verbs)
    }
    before = {NEEDS_FIRST[name] for name in named if name in NEEDS_FIRST}

    def rank(tool: Named) -> tuple[bool, bool, bool]:
        return (
            tool.name not in before,
            tool.name not in named,
            not _holds_value_for(tool.name, request),
        )

    return rank


def _holds_value_for(name: str, request: str) -> bool:
    pattern = BUILTIN_PATTERNS.get(name)
    return pattern is not None and pattern.search(request) is not None


def _needed(name: str, request: str, recent: str) -> bool:
    if name in FOLLOW_UP_TOOLS:
        return name in recent
    return (
        _mentions(request, name)
        or any(_mentions(request, word) for word in BUILTIN_KEYWORDS.get(name, ()))
        or _holds_value_for(name, request)
    )
