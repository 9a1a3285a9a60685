"""The MCP face: an MCP server (the `mcp` SDK, streamable HTTP at `/mcp`) whose tools are
the agents the caller may run (`mcp_server.py`), and its route and life here.

Every HTTP request to `/mcp` carries a Tether bearer token, checked by the identity
model's dependency before the SDK sees the request (401 without one, or with a wrong
one; 403 for a role that starts no runs). Those refusals, and every other error answer of
the route, are JSON-RPC error bodies (`McpRoute`): an MCP client reads a non-2xx body as
the answer to its request when it is one, and shows its message (`unauthenticated: …`),
where it would otherwise say only "Server returned an error response". Tether's code and
the status are in the error's `data`. The SDK is imported and its session
manager started on the first such request, not at every brain start: the import costs
about a fifth of the start's CPU (replicas restarted on a busy machine pay it while their
peers take over runs), and most deployments never call the face. The import runs in a
thread, so the loop goes on serving while it does (the GIL is shared, not held).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from tether_brain.faces.openai_errors import ERROR_RESPONSES
from tether_brain.faces.shaped import ShapedRoute
from tether_brain.runs.manager import RunManager
from tether_common.errors import ErrorCode, MessageError
from tether_common.http import TEXT_BODY_LIMIT, body_limit
from tether_common.identity.http import Caller

if TYPE_CHECKING:
    from tether_brain.faces.mcp_server import McpServer

log = logging.getLogger(__name__)


# JSON-RPC's own codes (the SDK is not imported here: see the module's docstring).
JSONRPC_INVALID_REQUEST = -32600
JSONRPC_INTERNAL_ERROR = -32603


class RefusalData(BaseModel):
    code: str = Field(description="Tether's error code (`unauthenticated`, `forbidden`...)")
    status: int = Field(description="the HTTP status it came with")


class RpcErrorDetail(BaseModel):
    code: int = Field(description="-32600 (invalid request) for a 4xx, -32603 for a 5xx")
    message: str = Field(description="`<Tether's code>: <what went wrong>`")
    data: RefusalData


class RpcErrorBody(BaseModel):
    """A route's refusal as a JSON-RPC error response (`id` null: the request was refused
    before it was read; the SDK's client puts its own id back)."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: None = None
    error: RpcErrorDetail


def jsonrpc_error(status: int, code: str, message: str) -> RpcErrorBody:
    rpc_code = JSONRPC_INTERNAL_ERROR if status >= 500 else JSONRPC_INVALID_REQUEST
    detail = RpcErrorDetail(
        code=rpc_code, message=f"{code}: {message}", data=RefusalData(code=code, status=status)
    )
    return RpcErrorBody(error=detail)


# The statuses the route answers with a refusal, for the OpenAPI document.
_REFUSALS: dict[int | str, dict[str, Any]] = {
    status: {"model": RpcErrorBody, "description": ERROR_RESPONSES[status]["description"]}
    for status in (400, 401, 403, 413)
}


class McpRoute(ShapedRoute):
    """A route whose every error answer (auth and body checks included: they run inside
    the route's handler) is the app's own, logged and counted, reshaped as JSON-RPC."""

    def shape(self, status: int, code: str, message: str) -> dict[str, Any]:
        return jsonrpc_error(status, code, message).model_dump()


def _server_class() -> type[McpServer]:
    from tether_brain.faces.mcp_server import McpServer

    return McpServer


class McpFace:
    """The MCP server behind the `/mcp` route (`router`), from its first request until
    the brain stops."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self._server: McpServer | None = None
        self._loading = asyncio.Lock()
        self._serving: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def server(self) -> McpServer:
        """The MCP server, imported and started by the first request that needs it."""
        async with self._loading:
            if self._server is None:
                server_class = await asyncio.to_thread(_server_class)
                self._server = await self._start(server_class(self.manager))
        return self._server

    async def _start(self, server: McpServer) -> McpServer:
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        serving = asyncio.create_task(server.serve(started, self._stopping), name="mcp face")
        await asyncio.wait({started, serving}, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():  # it did not start: this request fails, the next tries again
            started.cancel()
            serving.result()  # raises what ended it
        self._serving = serving
        return server

    async def stop(self) -> None:
        """End the MCP calls in flight (their runs go on) and the session manager."""
        async with self._loading:
            self._stopping.set()
            serving, self._serving = self._serving, None
            if serving is None:
                return
            await asyncio.wait({serving})
            if not serving.cancelled() and (error := serving.exception()) is not None:
                log.error("the MCP session manager failed", exc_info=error)


# The face on `app.state` (app.py puts it there).
MCP_FACE = "mcp_face"


async def mcp_face(request: Request) -> McpFace:
    found: McpFace = getattr(request.app.state, MCP_FACE)
    return found


async def mcp_endpoint(
    request: Request, face: Annotated[McpFace, Depends(mcp_face)], who: Caller
) -> Response:
    """MCP over streamable HTTP (JSON-RPC; see the MCP specification). Tools: the
    agents the caller may run. The protocol's own errors are JSON-RPC errors."""
    who.require("runs.start")
    # The SDK answers this one in plain text: ours is the structured 400.
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("application/json"):
        raise MessageError(
            "an MCP request is JSON-RPC: Content-Type must be application/json",
            code=ErrorCode.BAD_REQUEST,
        )
    return (await face.server()).exchange(who)


router = APIRouter(tags=["mcp"], route_class=McpRoute)
# POST only: a stateless server holds no session to delete and offers no stream at GET
# (the SDK's client asks for neither without a session id); both answer 405.
router.add_api_route(
    "/mcp",
    mcp_endpoint,
    methods=["POST"],
    response_class=Response,
    responses=_REFUSALS,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
)


__all__ = ["MCP_FACE", "McpFace", "McpRoute", "RpcErrorBody", "jsonrpc_error", "router"]
