"""A stdio MCP server for the service-kill chaos test: two slow tools, one read-only
(idempotent) and one that writes; each appends a line to a ledger file as it starts, so
the test can count how many times a call really ran across a runner's SIGKILL. A third,
`tagged_write`, names its call in the ledger for the chaos benchmark.

An optional second argument names a hold file: while it exists, the server does not
start (its client's handshake waits), so a test decides when the server comes up. A
held server says so in `<hold>.held` (its imports done: it starts at once when let go)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("chaos")
LEDGER = Path(sys.argv[1])
HOLD = Path(sys.argv[2]) if len(sys.argv) > 2 else None


def _started(what: str) -> None:
    with LEDGER.open("a") as ledger:
        ledger.write(f"{what}\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def slow_read(seconds: float) -> str:
    """Wait `seconds`, then say so (a read: safe to run again)."""
    _started("read")
    time.sleep(seconds)
    return f"read after {seconds}s"


@server.tool(
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
)
def slow_write(seconds: float, ctx: Context) -> str:
    """Wait `seconds`, then say so (a write: never to be run twice blindly)."""
    _started("write")
    # The idempotency key the runner passes in the request's `_meta`, one line a call.
    meta = ctx.request_context.meta or {}
    with LEDGER.with_suffix(".keys").open("a") as keys:
        keys.write(f"{meta.get('tether/idempotency-key')}\n")
    time.sleep(seconds)
    return f"written after {seconds}s"


@server.tool(
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
)
def tagged_write(tag: str, seconds: float) -> str:
    """Wait `seconds`, then say so; the ledger line names `tag`, so a counter outside
    the system can tell which call ran how often (`python -m bench chaos`)."""
    _started(f"effect {tag}")
    time.sleep(seconds)
    return f"wrote {tag}"


if __name__ == "__main__":
    if HOLD is not None and HOLD.exists():
        HOLD.with_name(f"{HOLD.name}.held").touch()
    while HOLD is not None and HOLD.exists():
        time.sleep(0.05)
    server.run("stdio")
