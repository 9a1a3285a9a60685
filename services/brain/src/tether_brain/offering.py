"""Offering many tools well: when more than `CONNECTOR_LIMIT` connector tools (MCP servers
and other per-service tools, named `mcp.<service>.<tool>` or `<service>.<…>`) are available,
only the services the question or the recent messages point at are offered; the others are
named in one line. Built-in tools are never hidden, and a hidden tool still runs when the
model names it (the gates see the whole catalogue)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
