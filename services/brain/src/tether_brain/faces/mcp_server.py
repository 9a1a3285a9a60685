"""The MCP face's server (the `mcp` SDK): one tool per agent the caller may run, taking
`{"task": str}` and answering the agent's final answer as text. A call is a run started as
the caller through `RunManager.start` (tools, gates, approvals, budgets and audit apply);
each event of tool activity is a progress notification when the client asked for progress.

Loaded by `faces.mcp.McpFace` on the first request to `/mcp`, not at start: the SDK costs
about a fifth of the brain's start-up CPU, and most deployments never call it. Each MCP
request is served for the principal of the HTTP request that carried it (the route verified
it and left it in the request's scope). The server is stateless (no session held in
memory; POST only), so any brain replica serves any request. An agent the caller may not
run is not listed, and calling it is the protocol's invalid-params error.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

import mcp.types as mcp_types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from tether_brain.faces.agents import may_run, runnable
from tether_brain.faces.following import Activity, Ending, Follower, start_request
from tether_brain.runs.manager import RunManager
from tether_common.errors import TetherError
from tether_common.http import TEXT_BODY_LIMIT
from tether_common.identity import Principal
from tether_common.messages.runs import RunEvent

# Where the route leaves the verified caller for the MCP handlers (the request's scope).
PRINCIPAL_KEY = "tether.principal"
TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200_000,
            "description": "what the agent should do, in plain words",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}
Context = ServerRequestContext[Any, Any]
# How long a call waits for its run (a parked one included): below the 300 s of silence
# the SDK's client reads by default, so a call parked longer ends with the run's
# whereabouts (`is_error`) rather than the client's timeout. The run goes on.
CALL_WAIT_S = 240.0


def _tool(agent_id: str) -> mcp_types.Tool:
    return mcp_types.Tool(
        name=agent_id,
        description=(
            f"Hand a task to the Tether agent '{agent_id}'. It works with its own tools under "
            "Tether's gates, approvals and audit, and answers with its final answer."
        ),
        input_schema=TASK_SCHEMA,
    )


def _caller(ctx: Context) -> Principal:
    who = None if ctx.request is None else ctx.request.scope.get(PRINCIPAL_KEY)
    if not isinstance(who, Principal):  # never: `/mcp` is the only way in
        raise MCPError(mcp_types.INVALID_REQUEST, "no verified caller on this request")
    return who


def _said(event: RunEvent) -> str:
    """One line of progress for an event of tool activity."""
    name = event.data.get("name") or event.data.get("task") or ""
    return f"{event.kind} {name}".strip()


def _result(ending: Ending) -> mcp_types.CallToolResult:
    failure = ending.failure()
    text = ending.text if failure is None else failure.message
    failed = failure is not None or ending.waited_out
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)], is_error=failed)


class McpServer:
    """The MCP server and its session manager; `serve` runs the manager until stopped."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.follower = Follower(manager)
        self.server: Server[Any] = Server(
            "tether",
            version=importlib.metadata.version("tether-brain"),  # the SDK says "" unless told
            instructions="Each tool is a Tether agent: give it a task, get its final answer.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.sessions = StreamableHTTPSessionManager(
            self.server, stateless=True, max_request_body_size=TEXT_BODY_LIMIT
        )

    async def serve(self, started: asyncio.Future[None], stopping: asyncio.Event) -> None:
        """Run the session manager (in one task: its task group must be left by the task
        that entered it) until `stopping` is set; `started` once requests can be served."""
        async with self.sessions.run():
            started.set_result(None)
            await stopping.wait()

    def exchange(self, who: Principal) -> Response:
        """The route's answer to one request: the SDK's transport serves it, as `who`."""
        return _Exchange(self.sessions, who)

    async def _list_tools(
        self, ctx: Context, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(
            tools=[_tool(a) for a in runnable(self.manager, _caller(ctx))]
        )

    async def _call_tool(
        self, ctx: Context, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        who = _caller(ctx)
        if not may_run(self.manager, who, params.name):
            raise MCPError(mcp_types.INVALID_PARAMS, f"no tool '{params.name}' for this caller")
        task = (params.arguments or {}).get("task")
        if not isinstance(task, str) or not task.strip():
            raise MCPError(mcp_types.INVALID_PARAMS, "'task' must be a non-empty string")
        try:
            run_id = await self.follower.start(start_request(task, params.name), who)
            told = 0
            async for item in self.follower.follow(run_id, who, CALL_WAIT_S):
                if isinstance(item, Activity):
                    told += 1
                    await ctx.session.report_progress(told, None, _said(item.event))
                elif isinstance(item, Ending):
                    return _result(item)
        except TetherError as exc:  # a refused start, an unreachable service: the tool's error
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(text=f"{exc.code}: {exc.message}")], is_error=True
            )
        raise MCPError(mcp_types.INTERNAL_ERROR, "the run's events ended without an ending")


class _Exchange(Response):
    """The route's answer: the SDK's transport serves the request, as `who`."""

    def __init__(self, sessions: StreamableHTTPSessionManager, who: Principal) -> None:
        super().__init__()
        self.sessions, self.who = sessions, who

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[PRINCIPAL_KEY] = self.who
        await self.sessions.handle_request(scope, receive, send)


__all__ = ["CALL_WAIT_S", "McpServer"]
