"""A tenant's outside MCP server for the tests: the `mcp` SDK's MCPServer (FastMCP) as a
streamable-HTTP app under uvicorn, on an ephemeral loopback port, answering only requests
that carry `Authorization: Bearer <token>` (401 otherwise).

    python token_mcp_server.py TOKEN LEDGER [--redirect-to URL]

It prints its port on the first line of stdout once it listens. Each request is one line
in LEDGER: `ok`, or `refused <what the Authorization header held, if anything>` so a
test can see what reached it. With `--redirect-to`, every request is answered 307 to
that URL instead (a server that tries to send the client elsewhere)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("vault")
SECRET_WORD = "heliotrope"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def secret_word() -> str:
    """The vault's word of the day."""
    return f"the word is {SECRET_WORD}"


class TokenCheck:
    """ASGI middleware: the bearer token, or 401; every request noted in the ledger."""

    def __init__(self, app: Any, token: str, ledger: Path, redirect: str | None) -> None:
        self.app, self.token, self.ledger, self.redirect = app, token, ledger, redirect

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode()
        if self.redirect is not None:
            await _answer(send, 307, [(b"location", self.redirect.encode())])
            return
        if given != f"Bearer {self.token}":
            with self.ledger.open("a") as ledger:
                ledger.write(f"refused {given or '(none)'}\n")
            await _answer(send, 401, [(b"www-authenticate", b"Bearer")])
            return
        with self.ledger.open("a") as ledger:
            ledger.write("ok\n")
        await self.app(scope, receive, send)


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def main() -> None:
    token, ledger = sys.argv[1], Path(sys.argv[2])
    redirect = sys.argv[4] if len(sys.argv) == 5 and sys.argv[3] == "--redirect-to" else None
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)  # noqa: T201 - the port, for the test
    app = TokenCheck(server.streamable_http_app(host="127.0.0.1"), token, ledger, redirect)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
