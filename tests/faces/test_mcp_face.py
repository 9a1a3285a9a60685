"""The MCP face, driven by the `mcp` SDK's own client over streamable HTTP against the real
services: the tools are the agents the caller may run, a call runs the agent and answers
its final answer (tool activity as progress), and a caller without a valid token, or
asking for an agent it may not run, is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from faces_support import DEFAULT_ANSWER, DEFAULT_SCRIPT, PRIVILEGED, Callers
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, TextContent

from tether_common.testing import call, say

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def session_as(callers: Callers, token: str) -> AsyncIterator[ClientSession]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(f"{callers.brain}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def text_of(content: list[object]) -> str:
    return "".join(block.text for block in content if isinstance(block, TextContent))


async def test_the_tools_are_the_agents_the_caller_may_run(callers: Callers) -> None:
    async with session_as(callers, callers.admin) as admin:
        everything = {tool.name: tool for tool in (await admin.list_tools()).tools}
    async with session_as(callers, callers.client) as client:
        mine = [tool.name for tool in (await client.list_tools()).tools]
        with pytest.raises(MCPError) as refused:
            await client.call_tool(PRIVILEGED, {"task": "do the privileged thing"})
        assert refused.value.code == INVALID_PARAMS
    assert {"default", PRIVILEGED} <= set(everything)
    assert everything["default"].input_schema["required"] == ["task"]
    assert mine == ["default"]


async def test_a_call_runs_the_agent_with_progress(callers: Callers, scripts_dir: Path) -> None:
    turns = [[call("current_time", timezone="UTC")], say(DEFAULT_ANSWER)]
    # The brain's own script (a client may not choose another): now with a tool call.
    (scripts_dir / f"{DEFAULT_SCRIPT}.json").write_text(json.dumps({"turns": turns}))
    told: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    async with session_as(callers, callers.client) as client:
        result = await client.call_tool(
            "default", {"task": "say hello, with the time"}, progress_callback=progress
        )
    assert not result.is_error, result
    assert text_of(list(result.content)) == DEFAULT_ANSWER
    assert told[:2] == ["tool.call current_time", "tool.result current_time"]


async def test_a_caller_without_a_valid_token_is_refused(callers: Callers) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer tth_forged"}):
            response = await http.post("/mcp", json=body, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthenticated"
        viewer = {"Authorization": f"Bearer {callers.viewer}"}
        response = await http.post("/mcp", json=body, headers=viewer)
        assert response.status_code == 403
    # The SDK's client meets the same refusal (as its own error, in its task groups).
    with pytest.raises(ExceptionGroup) as refused:
        async with session_as(callers, "tth_forged"):
            pass
    assert refused.group_contains(MCPError)


async def test_requests_that_are_not_mcp_are_refused_cleanly(callers: Callers) -> None:
    """What a route walk or a fuzzer sends: a 4xx from the transport, never a 5xx."""
    admin = {"Authorization": f"Bearer {callers.admin}"}
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        for body in ({}, [1]):
            response = await http.post("/mcp", json=body, headers=admin)
            assert 400 <= response.status_code < 500, (body, response.text)
            assert response.status_code not in (401, 403)
        response = await http.post("/mcp", content=b"{}", headers=admin)  # no Content-Type
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "bad_request"
        # A well-formed request for no method: the protocol's own error, in an answer.
        unknown = {"jsonrpc": "2.0", "id": 1, "method": "no/such"}
        accept = {"Accept": "application/json, text/event-stream"}
        response = await http.post("/mcp", json=unknown, headers=admin | accept)
        assert response.status_code == 200
        assert str(METHOD_NOT_FOUND) in response.text
        for method in ("GET", "DELETE"):  # stateless: no stream to open, no session to end
            response = await http.request(method, "/mcp", headers=admin)
            assert response.status_code == 405
