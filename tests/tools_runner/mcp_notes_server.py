"""A small MCP server written with the `mcp` SDK, run over stdio by the MCP tests.

It keeps notes in memory and can be told to crash, so the runner's restart is tested
against a real process; `--http PORT` serves streamable HTTP instead of stdio."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("notes")
NOTES: dict[str, str] = {}


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def read_note(name: str) -> str:
    """Read one note by name."""
    return NOTES.get(name, f"no note named {name}")


@server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
def delete_note(name: str) -> str:
    """Delete one note."""
    return "deleted" if NOTES.pop(name, None) is not None else "nothing to delete"


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write a note (unannotated on purpose)."""
    NOTES[name] = text
    return f"saved {name}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail() -> str:
    """Always fails."""
    raise ToolError("this tool always fails")


@server.tool()
def crash() -> str:
    """Kill this server process at once."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
