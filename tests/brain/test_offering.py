"""Offering many tools: with 30 connector tools across 6 services, only the services the
recent text points at are offered; built-ins are never hidden."""

from __future__ import annotations

from typing import Any

from tether_brain.context.offering import CONNECTOR_LIMIT, DEFAULT_KEYWORDS, choose, service_of
from tether_common.messages.tools import ToolDescriptor

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
SERVICES = ["mail", "github", "dns", "calendar", "slack", "jira"]


def tool(name: str) -> ToolDescriptor:
    return ToolDescriptor(name=name, description=name, parameters=SCHEMA)


BUILTINS = [tool(n) for n in ("current_time", "calculate", "file_read", "shell")]
CONNECTORS = [tool(f"mcp.{s}.action_{i}") for s in SERVICES for i in range(5)]
ALL = BUILTINS + CONNECTORS


def offered_services(recent: str) -> set[str]:
    offer = choose(ALL, recent, DEFAULT_KEYWORDS)
    assert all(b in offer.tools for b in BUILTINS)
    return {s for t in offer.tools if (s := service_of(t.name)) is not None}


def test_thirty_connectors_are_narrowed_by_keywords() -> None:
    assert len(CONNECTORS) == 30
    assert offered_services("Anything new in my inbox?") == {"mail"}
    assert offered_services("Please open an issue about the crash") == {"github"}
    assert offered_services("Point the DNS record at the new server") == {"dns"}
    assert offered_services("Schedule a meeting and tell the team on slack") == {
        "calendar",
        "slack",
    }
    assert offered_services("What is 2+2?") == set()


def test_the_others_are_named_in_one_line() -> None:
    offer = choose(ALL, "check my inbox", DEFAULT_KEYWORDS)
    note = offer.note()
    assert note is not None
    assert note.count("\n") == 0
    for service in ("github", "dns", "calendar", "slack", "jira"):
        assert service in note
    assert "mail," not in note


def test_few_connectors_are_all_offered() -> None:
    few = BUILTINS + CONNECTORS[:CONNECTOR_LIMIT]
    offer = choose(few, "nothing relevant", DEFAULT_KEYWORDS)
    assert offer.tools == few
    assert offer.note() is None


def test_service_names() -> None:
    assert service_of("mcp.github.create_issue") == "github"
    assert service_of("crm.contacts.list") == "crm"
    assert service_of("file_read") is None
