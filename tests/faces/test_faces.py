"""The faces other tools speak, driven by those tools' own clients against the real
services (one stack for both).

OpenAI: the official `openai` SDK. A completion runs a Tether agent (its tools, gates and
approvals) and answers its final answer, streamed (live text, tool notes) or not; the
models are the agents the caller may run; errors come back as the SDK's own exception
classes with Tether's error body.

MCP: the `mcp` SDK's client over streamable HTTP. The tools are the agents the caller may
run, a call runs the agent and answers its final answer (tool activity as progress), and
a caller without a valid token, or asking for an agent it may not run, is refused.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, TextContent
from openai.types.chat import ChatCompletionMessageParam

from faces_support import (
    ADMIN_TOKEN,
    ASK_ARGUMENTS,
    ASKS,
    DEFAULT_ANSWER,
    DEFAULT_SCRIPT,
    PRIVILEGED,
    Callers,
    decide,
)
from tether_common.testing import call, say, write_script

pytestmark = pytest.mark.e2e

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "what time is it in Tokyo?"}
]
# No live-data reminder follows an answer to it.
GREETING: list[ChatCompletionMessageParam] = [{"role": "user", "content": "say hello"}]


def sdk(callers: Callers, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{callers.brain}/v1", api_key=token, max_retries=0, timeout=120
    )


def scripted(scripts_dir: Path, *turns: Any) -> dict[str, Any]:
    """The `tether` extension naming a script of its own (an admin may choose)."""
    return {"tether": {"provider": "scripted", "model": write_script(scripts_dir, list(turns))}}


@pytest.fixture
async def admin(callers: Callers) -> AsyncIterator[openai.AsyncOpenAI]:
    async with sdk(callers, callers.admin) as client:
        yield client


async def test_a_completion_runs_the_agent_and_answers(
    admin: openai.AsyncOpenAI, callers: Callers, scripts_dir: Path
) -> None:
    turns = [[call("current_time", timezone="Asia/Tokyo")], say("It is evening in Tokyo.")]
    history: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        *QUESTION,
    ]
    completion = await admin.chat.completions.create(
        model="default", messages=history, extra_body=scripted(scripts_dir, *turns)
    )
    assert completion.choices[0].message.content == "It is evening in Tokyo."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens >= 0
    note = (completion.model_extra or {})["tether"]
    assert note["event"] == "run.end"
    assert note["status"] == "completed"
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        run = await http.get(
            f"/v1/runs/{note['run_id']}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
    view = run.json()
    assert view["status"] == "completed"
    assert view["owner"] == "operator"
    # The caller's instructions and earlier turns are in the run's one prompt.
    for said in ("Answer in one sentence.", "Hi, how can I help?", "what time is it in Tokyo?"):
        assert said in view["prompt"]
    assert [s["tool"] for s in view["steps"] if s["kind"] == "tool"] == ["current_time"]


async def test_a_stream_assembles_the_answer_with_tool_notes(
    admin: openai.AsyncOpenAI, scripts_dir: Path
) -> None:
    turns = [[call("current_time", timezone="UTC")], say("Noon, UTC.")]
    stream = await admin.chat.completions.create(
        model="default",
        messages=QUESTION,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=scripted(scripts_dir, *turns),
    )
    text, notes, finish, usage = "", [], None, None
    async for chunk in stream:
        if note := (chunk.model_extra or {}).get("tether"):
            notes.append(note)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    assert text == "Noon, UTC."
    assert finish == "stop"
    assert usage is not None
    kinds = [n["event"] for n in notes]
    assert kinds[:2] == ["tool.call", "tool.result"]
    assert kinds[-1] == "run.end"
    assert notes[0]["data"]["name"] == "current_time"
    assert notes[1]["data"]["ok"] is True


async def test_a_parked_run_keeps_the_stream_open_until_decided(
    admin: openai.AsyncOpenAI, callers: Callers, scripts_dir: Path
) -> None:
    turns = [[call(ASKS, **ASK_ARGUMENTS)], say("18:00 in Tokyo.")]
    stream = await admin.chat.completions.create(
        model="default", messages=QUESTION, stream=True, extra_body=scripted(scripts_dir, *turns)
    )
    text, kinds = "", []
    async for chunk in stream:
        note = (chunk.model_extra or {}).get("tether") or {}
        kinds.append(note.get("event"))
        if note.get("event") == "tool.approval_needed":
            # The stream is still open: the decision arrives while it waits.
            await decide(callers.approvals, note["data"]["approval_id"])
        for choice in chunk.choices:
            text += choice.delta.content or ""
    assert "tool.approval_needed" in kinds
    assert "tool.approved" in kinds
    assert text == "18:00 in Tokyo."


async def test_a_wait_that_runs_out_says_where_the_run_waits(
    admin: openai.AsyncOpenAI, scripts_dir: Path
) -> None:
    extra = scripted(scripts_dir, [call(ASKS, **ASK_ARGUMENTS)], say("never"))
    extra["tether"]["wait_s"] = 2
    completion = await admin.chat.completions.create(
        model="default", messages=QUESTION, extra_body=extra
    )
    note = (completion.model_extra or {})["tether"]
    assert note["status"] == "awaiting_approval"
    assert note["data"]["waited_out"] is True
    content = completion.choices[0].message.content or ""
    assert "waiting for an operator" in content
    assert note["run_id"] in content


async def test_models_are_the_agents_the_caller_may_run(callers: Callers) -> None:
    async with sdk(callers, callers.admin) as admin, sdk(callers, callers.client) as client:
        everything = {m.id async for m in admin.models.list()}
        mine = [m.id async for m in client.models.list()]
        assert {"default", PRIVILEGED} <= everything
        assert mine == ["default"]
        assert (await admin.models.retrieve(PRIVILEGED)).id == PRIVILEGED
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve(PRIVILEGED)
        # What is not listed does not run either.
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await client.chat.completions.create(model=PRIVILEGED, messages=QUESTION)
        assert refused.value.code == "forbidden"
        # The brain's own script (a client may not choose another).
        answer = await client.chat.completions.create(model="default", messages=GREETING)
        assert answer.choices[0].message.content == DEFAULT_ANSWER
    async with sdk(callers, callers.viewer) as viewer:
        with pytest.raises(openai.PermissionDeniedError):
            await viewer.models.list()


async def test_a_wrong_key_is_an_authentication_error(callers: Callers) -> None:
    async with sdk(callers, "tth_not_a_token") as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            await stranger.chat.completions.create(model="default", messages=QUESTION)
        assert refused.value.code == "unauthenticated"
        with pytest.raises(openai.AuthenticationError):
            await stranger.models.list()


async def test_an_unknown_model_is_not_found(admin: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await admin.chat.completions.create(model="no-such-agent", messages=QUESTION)
    assert missing.value.code == "not_found"
    with pytest.raises(openai.NotFoundError):
        await admin.models.retrieve("no-such-agent")


@pytest.mark.parametrize(
    "body",
    [
        {"model": "default", "messages": []},
        {"model": "default", "messages": [{"role": "assistant", "content": "last"}]},
        {"model": "default", "messages": [{"role": "user", "content": "x" * 200_001}]},
        {"model": "default", "messages": [{"role": "wizard", "content": "hi"}]},
        {"messages": QUESTION},
        {"model": "default", "messages": QUESTION, "n": 2},
    ],
)
async def test_a_bad_body_is_refused_with_the_error_body(
    callers: Callers, body: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    if "model" not in body:
        return  # the SDK itself refuses to send it
    async with sdk(callers, callers.admin) as admin:
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            await admin.chat.completions.create(**body)
    assert refused.value.code == "invalid_request"


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    ("sent", "param"),
    [
        ({"tools": [WEATHER_TOOL]}, "tools"),
        ({"tools": [WEATHER_TOOL], "tool_choice": "auto"}, "tools"),
        ({"functions": [WEATHER_TOOL["function"]]}, "functions"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "x"}}}, "tool_choice"),
        ({"function_call": {"name": "get_weather"}}, "function_call"),
    ],
)
async def test_a_clients_own_tools_are_refused_not_ignored(
    admin: openai.AsyncOpenAI, sent: dict[str, Any], param: str
) -> None:
    """Issue 29, 7: the agent's tools are what run (its grants and policy decide), so a
    client's function-calling tools are a 400 naming the parameter, as OpenAI refuses a
    parameter it does not support, never silently dropped. No run starts."""
    with pytest.raises(openai.BadRequestError) as refused:
        await admin.chat.completions.create(model="default", messages=GREETING, extra_body=sent)
    assert refused.value.code == "bad_request"
    assert f"'{param}' is not supported" in refused.value.message
    assert "agent's own tools" in refused.value.message


@pytest.mark.parametrize("sent", [{"tools": []}, {"tool_choice": "none"}, {"tool_choice": "auto"}])
async def test_tool_parameters_that_ask_for_nothing_pass(
    admin: openai.AsyncOpenAI, sent: dict[str, Any]
) -> None:
    answer = await admin.chat.completions.create(
        model="default", messages=GREETING, extra_body=sent
    )
    assert answer.choices[0].message.content == DEFAULT_ANSWER


async def test_a_failed_run_is_an_error(admin: openai.AsyncOpenAI, scripts_dir: Path) -> None:
    # A script with no turns: the run's first model turn fails (`script_exhausted`).
    with pytest.raises(openai.APIStatusError) as failed:
        await admin.chat.completions.create(
            model="default", messages=GREETING, extra_body=scripted(scripts_dir)
        )
    assert failed.value.status_code == 502
    assert failed.value.code == "script_exhausted"
    stream = await admin.chat.completions.create(
        model="default", messages=GREETING, stream=True, extra_body=scripted(scripts_dir)
    )
    with pytest.raises(openai.APIError, match="script_exhausted"):
        async for _chunk in stream:
            pass


async def test_a_stream_sends_the_text_as_it_is_written(
    admin: openai.AsyncOpenAI, scripts_dir: Path
) -> None:
    # Text before a call, then an answer written in two pieces a moment apart.
    turns = [
        # (a moment first: the face hears deltas from just after the run's start)
        [
            {"pause_s": 0.5},
            {"kind": "chunk", "text": "Let me look."},
            call("current_time", timezone="UTC"),
        ],
        [{"kind": "chunk", "text": "Noon"}, {"pause_s": 1.0}, {"kind": "chunk", "text": ", UTC."}],
    ]
    stream = await admin.chat.completions.create(
        model="default", messages=QUESTION, stream=True, extra_body=scripted(scripts_dir, *turns)
    )
    pieces, answer = [], None
    async for chunk in stream:
        pieces += [c.delta.content for c in chunk.choices if c.delta.content]
        note = (chunk.model_extra or {}).get("tether") or {}
        if note.get("event") == "run.end":
            answer = note["status"]
    assert "".join(pieces) == "Let me look.\n\nNoon, UTC."
    # Live: the answer came in more than one piece (without deltas it is one at the end).
    assert pieces.index("Let me look.") == 0
    assert len(pieces) >= 3
    assert answer == "completed"


# ---- the MCP face ------------------------------------------------------------


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

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        told.append(message or "")

    async with session_as(callers, callers.client) as client:
        result = await client.call_tool(
            "default", {"task": "say hello, with the time"}, progress_callback=heard
        )
    assert not result.is_error, result
    assert text_of(list(result.content)) == DEFAULT_ANSWER
    assert told[:2] == ["tool.call current_time", "tool.result current_time"]


async def test_the_server_says_its_real_version(callers: Callers) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {callers.admin}"})
    async with (
        http,
        streamable_http_client(f"{callers.brain}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        started = await session.initialize()
    assert started.server_info.name == "tether"
    assert started.server_info.version == importlib.metadata.version("tether-brain")


async def test_a_caller_without_a_valid_token_is_refused(callers: Callers) -> None:
    """Refusals are JSON-RPC error bodies (Tether's code and the status in `data`), so
    the SDK's client shows what went wrong, not "Server returned an error response"."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer tth_forged"}):
            response = await http.post("/mcp", json=body, headers=headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
            error = response.json()["error"]
            assert (error["code"], error["data"]) == (
                INVALID_REQUEST,
                {"code": "unauthenticated", "status": 401},
            )
            assert error["message"].startswith("unauthenticated: ")
        viewer = {"Authorization": f"Bearer {callers.viewer}"}
        response = await http.post("/mcp", json=body, headers=viewer)
        assert response.status_code == 403
        assert response.json()["error"]["data"]["code"] == "forbidden"
    # The SDK's client meets the same refusal as its own error, saying why.
    for token, why in (("tth_forged", "unauthenticated: "), (callers.viewer, "forbidden: ")):
        with pytest.raises(ExceptionGroup) as refused:
            async with session_as(callers, token):
                pass
        assert refused.group_contains(MCPError, match=why), refused.value
        assert not refused.group_contains(MCPError, match="Server returned an error response")


async def test_requests_that_are_not_mcp_are_refused_cleanly(callers: Callers) -> None:
    """What a route walk or a fuzzer sends: a 4xx from the transport, never a 5xx."""
    admin = {"Authorization": f"Bearer {callers.admin}"}
    async with httpx.AsyncClient(base_url=callers.brain, timeout=30) as http:
        bodies: tuple[object, ...] = ({}, [1])
        for body in bodies:
            response = await http.post("/mcp", json=body, headers=admin)
            assert 400 <= response.status_code < 500, (body, response.text)
            assert response.status_code not in (401, 403)
        response = await http.post("/mcp", content=b"{}", headers=admin)  # no Content-Type
        assert response.status_code == 400
        assert response.json()["error"]["data"]["code"] == "bad_request"
        # A well-formed request for no method: the protocol's own error, in an answer.
        unknown = {"jsonrpc": "2.0", "id": 1, "method": "no/such"}
        accept = {"Accept": "application/json, text/event-stream"}
        response = await http.post("/mcp", json=unknown, headers=admin | accept)
        assert response.status_code == 200
        assert str(METHOD_NOT_FOUND) in response.text
        for method in ("GET", "DELETE"):  # stateless: no stream to open, no session to end
            response = await http.request(method, "/mcp", headers=admin)
            assert response.status_code == 405
