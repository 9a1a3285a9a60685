"""The `local` provider: the openai adapter on the local server's URL, one model, no key,
an output cap, and the text protocol unless switched off; a run's steps open with the
same prompt bytes (so the server's KV cache reuses them), listing only the run's tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from builtin_tools import RUNNER_TOOLS, offered
from tether_brain.context.cards import compact_card
from tether_brain.context.offering import DEFAULT_KEYWORDS, compact_offer
from tether_brain.context.prompting import build_request
from tether_brain.state.run import Limits, RunState
from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    OfferedToolSpec,
    ToolCallEvent,
    UsageEvent,
)
from tether_gateway.providers.local import LocalProvider
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Reply, collect, sse

CLOCK = OfferedToolSpec(
    name="current_time",
    description="The time now in a zone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
)


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-local",
        "provider": "local",
        "messages": [ChatMessage(role="user", content="Time in Tokyo?")],
        "tools": [CLOCK],
    }
    return GenerateRequest(**{**base, **changes})


def stream(text: str) -> Reply:
    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}
    return Reply(pieces=[sse(delta), sse(usage), sse("[DONE]")])


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def settings(upstream: FakeUpstream, **changes: Any) -> GatewaySettings:
    base: dict[str, Any] = {
        "local_base_url": f"{upstream.url}/v1",
        "openai_api_key": SecretStr("sk-must-not-leave-0123"),
        "retry_attempts": 0,
        "connect_timeout_s": 2.0,
        "inactivity_timeout_s": 2.0,
    }
    return GatewaySettings(**{**base, **changes})


async def test_a_text_call_becomes_a_tool_call(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("```tool\n{'name': 'current_time', 'args': {'timezone': 'Asia/Tokyo'}}"))
    events = await collect(LocalProvider(settings(upstream), http).generate(request()))
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert (call.name, call.arguments) == ("current_time", {"timezone": "Asia/Tokyo"})
    usage = next(e for e in events if isinstance(e, UsageEvent))
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (40, 9, False)
    assert events[-1] == DoneEvent(finish_reason="tool_calls")


async def test_the_request_goes_to_the_local_server_for_its_one_model(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    provider = LocalProvider(settings(upstream, local_model="smol"), http)
    await collect(provider.generate(request(model="named-by-the-run")))
    sent = upstream.received[0]
    body = sent.json()
    assert sent.path == "/v1/chat/completions"
    assert "authorization" not in sent.headers
    assert body["model"] == "smol"
    assert body["max_tokens"] == 512
    assert "tools" not in body
    # The local default profile: text protocol under a grammar (one JSON object a reply).
    assert "current_time" in body["messages"][0]["content"]
    assert body["response_format"]["type"] == "json_object"


async def test_a_run_limit_beats_the_default_cap(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    await collect(LocalProvider(settings(upstream), http).generate(request(max_output_tokens=64)))
    assert upstream.received[0].json()["max_tokens"] == 64


async def test_native_tools_when_the_text_protocol_is_off(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(stream("Nine."))
    provider = LocalProvider(settings(upstream, local_text_protocol=False), http)
    await collect(provider.generate(request()))
    body = upstream.received[0].json()
    assert body["tools"][0]["function"]["name"] == "current_time"


async def test_errors_name_the_local_provider(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    upstream.queue(Reply(status=400, pieces=[b'{"error": {"message": "context too long"}}']))
    events = await collect(LocalProvider(settings(upstream), http).generate(request()))
    error = events[-1]
    assert isinstance(error, ErrorEvent)
    assert error.code == "provider_bad_request"
    assert error.message.startswith("local answered HTTP 400")
    assert "context too long" in error.message


# --- The prompt a run's steps send the local server opens with the same bytes ----------
# On a CPU the prompt's prefill dominates a small model's step, and llama.cpp evaluates
# only what follows the longest prefix its KV cache shares with the previous prompt. The
# requests are built by the brain's real prompt builder (compact tier) and sent through
# the provider to a server speaking the OpenAI wire format; the bodies it receives are
# laid end to end as the local models' chat template (ChatML) lays them.

EDIT = "In todo.txt, replace the word milk with bread."
SPECS = offered(RUNNER_TOOLS)
MORNING = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def run_state(step: int, *, run_id: str = "run_prefix") -> RunState:
    state = RunState(
        run_id=run_id,
        prompt=EDIT,
        provider="local",
        model=None,
        limits=Limits(max_steps=6, max_tool_calls=10),
        created_at=MORNING,
        updated_at=MORNING,
        step=step,
    )
    state.messages.append(ChatMessage(role="user", content=EDIT))
    if step:
        call = CallRecord(id="c1", name="file_edit", arguments={"path": "todo.txt"})
        state.messages += [
            ChatMessage(role="assistant", tool_calls=[call]),
            ChatMessage(role="tool", content="read todo.txt first", tool_call_id="c1"),
        ]
    return state


def first_step() -> GenerateRequest:
    tools, hidden = compact_offer(SPECS, EDIT, EDIT, DEFAULT_KEYWORDS)
    return build_request(run_state(0), tools, False, [], hidden, tier="compact", now=MORNING)


def next_step(kind: str) -> GenerateRequest:
    state = run_state(1)
    tools, hidden = compact_offer(SPECS, EDIT, EDIT, DEFAULT_KEYWORDS)
    if kind == "result in":
        return build_request(state, tools, False, [], hidden, tier="compact", now=MORNING)
    if kind == "later the same day":
        evening = MORNING.replace(hour=23, minute=59)
        return build_request(state, tools, False, [], hidden, tier="compact", now=evening)
    if kind == "tools off to finish":
        return build_request(state, [], False, [], tier="compact", finishing=True, now=MORNING)
    if kind == "last step":
        return build_request(state, [], True, [], tier="compact", now=MORNING)
    assert kind == "narrowed to the call a failure names"
    only = [compact_card(s) for s in SPECS if s.name == "file_read"]
    return build_request(state, only, False, [], tier="compact", now=MORNING, must_call=True)


def chatml(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


async def bodies(
    provider: LocalProvider, upstream: FakeUpstream, requests: list[GenerateRequest]
) -> list[dict[str, Any]]:
    for asked in requests:
        upstream.queue(stream('{"tool": "none", "answer": "Done."}'))
        await collect(provider.generate(asked))
    return [received.json() for received in upstream.received[-len(requests) :]]


@pytest.mark.parametrize(
    "kind",
    [
        "result in",
        "later the same day",
        "tools off to finish",
        "last step",
        "narrowed to the call a failure names",
    ],
)
async def test_a_runs_next_step_opens_with_the_bytes_of_the_one_before(
    kind: str, upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    provider = LocalProvider(settings(upstream), http)
    one, two = await bodies(provider, upstream, [first_step(), next_step(kind)])
    before, after = chatml(one["messages"]), chatml(two["messages"])
    # Everything before the history (the tool prompt, the system text, today's date) ...
    system = len(chatml(one["messages"][:1]))
    assert "file_edit" in before[:system]
    assert after[:system] == before[:system]
    # ... and the history so far: step N's whole prompt opens step N+1's.
    assert after.startswith(before)
    assert len(after) > len(before)


@pytest.mark.parametrize(
    ("kind", "admitted", "refused"),
    [
        ("tools off to finish", set(), {"file_read", "file_edit"}),
        ("last step", set(), {"file_read", "file_edit"}),
        ("narrowed to the call a failure names", {"file_read"}, {"file_edit"}),
    ],
)
async def test_the_grammar_still_admits_only_the_steps_own_tools(
    kind: str,
    admitted: set[str],
    refused: set[str],
    upstream: FakeUpstream,
    http: httpx.AsyncClient,
) -> None:
    provider = LocalProvider(settings(upstream), http)
    _, two = await bodies(provider, upstream, [first_step(), next_step(kind)])
    # The prompt still lists the run's tools (its cached prefix), the grammar refuses them.
    assert "file_edit" in two["messages"][0]["content"]
    schema = json.dumps(two["response_format"]["schema"])
    assert all(name in schema for name in admitted)
    assert not any(f'"{name}"' in schema for name in refused)
    # A call to a tool the step does not offer is not taken, whatever the reply says.
    upstream.queue(stream('{"tool": "file_edit", "args": {"path": "todo.txt"}}'))
    events = await collect(provider.generate(next_step(kind)))
    assert not any(isinstance(e, ToolCallEvent) and e.name == "file_edit" for e in events)


@pytest.mark.parametrize(
    ("other", "listed"),
    [
        ({}, True),  # the same run's tools-off step
        ({"run_id": "run_someone_else"}, False),  # another run (maybe another tenant's)
        ({"system": "Summarise the conversation below."}, False),  # a side generation
    ],
)
async def test_a_prompt_lists_only_its_own_runs_tools(
    other: dict[str, str], listed: bool, upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    provider = LocalProvider(settings(upstream), http)
    first = first_step()
    later = next_step("tools off to finish")
    if "run_id" in other:
        later = later.model_copy(update={"run_id": other["run_id"]})
    if "system" in other:
        system = ChatMessage(role="system", content=other["system"])
        later = later.model_copy(update={"messages": [system, *later.messages[1:]]})
    _, two = await bodies(provider, upstream, [first, later])
    shown = two["messages"][0]["content"]
    assert ("file_edit" in shown) is listed
    assert ("## Tools" in shown) is listed


async def test_a_grown_offer_is_listed_from_then_on(
    upstream: FakeUpstream, http: httpx.AsyncClient
) -> None:
    provider = LocalProvider(settings(upstream), http)
    first = first_step()
    # After an unusable call the brain offers every tool: the list grows, once.
    every = [compact_card(s) for s in SPECS]
    grown = first.model_copy(update={"tools": every})
    finishing = next_step("tools off to finish")
    _, two, three = await bodies(provider, upstream, [first, grown, finishing])
    assert "web_search" in two["messages"][0]["content"]
    assert three["messages"][0]["content"] == two["messages"][0]["content"]
