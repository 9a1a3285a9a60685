"""Shared fixtures for the tool-call parser tests: a handful of realistic tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tether_common.toolcalls import ToolSpec


def strict(props: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(props),
        "required": required,
        "additionalProperties": False,
    }


STRING = {"type": "string"}
INTEGER = {"type": "integer"}

TOOLS = (
    ToolSpec("current_time", strict({"timezone": STRING}, ["timezone"]), description="Now."),
    ToolSpec(
        "file_read",
        strict({"path": STRING, "offset": INTEGER, "limit": INTEGER}, ["path"]),
        description="Read a text file from the workspace.",
    ),
    ToolSpec("shell", strict({"command": STRING, "timeout": INTEGER}, ["command"])),
    ToolSpec("web_search", strict({"query": STRING, "count": INTEGER}, ["query"])),
    ToolSpec("calculate", strict({"expression": STRING}, ["expression"])),
    ToolSpec(
        "file_list",
        strict(
            {
                "path": STRING,
                "recursive": {"type": "boolean"},
                "exclude": {"type": "array", "items": STRING},
            },
            [],
        ),
    ),
)


@pytest.fixture(scope="session")
def tools() -> tuple[ToolSpec, ...]:
    return TOOLS
