"""Grammar-constrained decoding: the reply schema (an answer branch and one branch per
offered tool), what the gateway sends an OpenAI-compatible server when the profile says
`grammar`, and how it reads each kind of reply; a local fake server speaks the wire."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    OfferedToolSpec,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.profiles import ModelProfile
from tether_common.toolcalls import read_reply, render_tool_prompt, reply_schema
from tether_gateway.profiles import FixedProfile
from tether_gateway.providers import OpenAIProvider, TextProtocol
from tether_gateway.providers.text_protocol import text_history
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, chat_text_stream, collect

MODEL = "small"
CALCULATE = OfferedToolSpec(
    name="calculate",
    description="Arithmetic.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "minLength": 1, "pattern": "^.+$"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)
CLOCK = OfferedToolSpec(
    name="current_time",
    description="The time.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": [],
        "additionalProperties": False,
    },
)


def asked(grammar: bool, settings: GatewaySettings, client: httpx.AsyncClient) -> TextProtocol:
    profile = ModelProfile(provider="openai", model=MODEL, tool_calling="text", grammar=grammar)
    profiles = FixedProfile(settings, profile)
    return TextProtocol(OpenAIProvider(settings, client, profiles=profiles), profiles)


def request(tools: list[OfferedToolSpec]) -> GenerateRequest:
    return GenerateRequest(
        run_id="r1",
        provider="openai",
        model=MODEL,
        messages=[
            ChatMessage(role="system", content="You help."),
            ChatMessage(role="user", content="What is 6 * 7?"),
        ],
        tools=tools,
    )


def test_the_schema_has_an_answer_branch_and_one_branch_per_tool() -> None:
    schema = reply_schema([CALCULATE, CLOCK])
    *calls, answer = schema["anyOf"]
    assert answer["required"] == ["tool", "answer"]
    assert answer["properties"]["tool"] == {"const": "none"}
    # The choice comes first: which tool, or none.
    assert [branch["properties"]["tool"]["const"] for branch in calls] == [
        "calculate",
        "current_time",
    ]
    args = calls[0]["properties"]["args"]
    # Only what every grammar converter reads cheaply: lengths and `pattern` left out.
    assert args["properties"]["expression"] == {"type": "string"}
    assert args["additionalProperties"] is False
    assert args["required"] == ["expression"]


async def test_a_grammar_profile_sends_the_schema_and_reads_a_call(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    reply = json.dumps({"tool": "calculate", "args": {"expression": "6 * 7"}})
    upstream.queue(chat_text_stream(reply, MODEL))
    events = await collect(asked(True, settings, client).generate(request([CALCULATE, CLOCK])))
    body = upstream.received[0].json()
    assert body["response_format"] == {
        "type": "json_object",
        "schema": reply_schema([CALCULATE, CLOCK]),
    }
    assert "tools" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("## Tools\nReply with exactly one JSON object")
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.arguments) for c in calls] == [("calculate", {"expression": "6 * 7"})]
    assert not [e for e in events if isinstance(e, ChunkEvent)]  # no JSON shown as text
    assert isinstance(events[-2], UsageEvent)
    assert events[-1] == DoneEvent(finish_reason="tool_calls")


async def test_the_answer_branch_is_plain_text(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    upstream.queue(chat_text_stream(json.dumps({"tool": "none", "answer": "6 * 7 is 42."}), MODEL))
    events = await collect(asked(True, settings, client).generate(request([CALCULATE])))
    assert "".join(e.text for e in events if isinstance(e, ChunkEvent)) == "6 * 7 is 42."
    assert events[-1] == DoneEvent(finish_reason="stop")


async def test_without_grammar_no_schema_is_sent(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    upstream.queue(chat_text_stream("42", MODEL))
    await collect(asked(False, settings, client).generate(request([CALCULATE])))
    assert "response_format" not in upstream.received[0].json()


async def test_a_tools_off_round_under_grammar_can_only_answer(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    """The brain's final round offers no tools: the schema is the answer branch alone, so
    the model cannot end the run on a raw call."""
    upstream.queue(chat_text_stream(json.dumps({"tool": "none", "answer": "It is 42."}), MODEL))
    events = await collect(asked(True, settings, client).generate(request([])))
    schema = upstream.received[0].json()["response_format"]["schema"]
    assert [branch["properties"]["tool"] for branch in schema["anyOf"]] == [{"const": "none"}]
    assert "".join(e.text for e in events if isinstance(e, ChunkEvent)) == "It is 42."
    assert not [e for e in events if isinstance(e, ToolCallEvent)]


async def test_a_required_call_under_grammar_has_no_answer_branch(
    upstream: FakeUpstream, client: httpx.AsyncClient, settings: GatewaySettings
) -> None:
    """`tool_choice="required"` (the brain's first step of a request that needs a tool):
    the schema is the call branches alone, and the prompt is the same as ever, so the
    cached prefix is too."""
    reply = json.dumps({"tool": "calculate", "args": {"expression": "6 * 7"}})
    upstream.queue(chat_text_stream(reply, MODEL), chat_text_stream(reply, MODEL))
    provider = asked(True, settings, client)
    required = request([CALCULATE, CLOCK]).model_copy(update={"tool_choice": "required"})
    await collect(provider.generate(required))
    await collect(provider.generate(request([CALCULATE, CLOCK])))
    must, free = (r.json() for r in upstream.received)
    assert must["response_format"]["schema"] == reply_schema([CALCULATE, CLOCK], answer=False)
    branches = must["response_format"]["schema"]["anyOf"]
    assert [b["properties"]["tool"]["const"] for b in branches] == ["calculate", "current_time"]
    assert "response_format" in free
    assert must["messages"] == free["messages"]


def test_under_grammar_the_prompt_leaves_the_tools_examples_out() -> None:
    """The grammar holds each call's shape; an example's values would be copied."""
    convert = OfferedToolSpec(
        name="convert_time",
        description='Converts a wall-clock time. Example: {"time": "09:00", "to": "America/New_York"}',
        parameters={"type": "object", "properties": {"time": {"type": "string"}}},
    )
    taught = render_tool_prompt([convert], json_reply=True)
    assert "- convert_time(time?: string): Converts a wall-clock time." in taught
    assert "America/New_York" not in taught
    assert "America/New_York" in render_tool_prompt([convert])  # the fenced protocol keeps it


def test_calls_in_the_history_are_written_as_the_grammar_has_them_written() -> None:
    call = CallRecord(id="c1", name="calculate", arguments={"expression": "6*7"})
    history = [
        ChatMessage(role="user", content="What is 6*7?"),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content="42", tool_call_id="c1", name="calculate"),
    ]
    under_grammar = text_history(history, json_reply=True)[1].content
    assert json.loads(under_grammar) == {"tool": "calculate", "args": {"expression": "6*7"}}
    assert text_history(history)[1].content.startswith('```tool\n{"name": "calculate"')


@pytest.mark.parametrize(
    ("text", "calls", "shown"),
    [
        (
            '{"name": "calculate", "args": {"expr": "1+1"',
            [("calculate", {"expression": "1+1"})],
            "",
        ),
        ('{"answer": "cut sho', [], "cut sho"),
        ("a model that ignored the grammar", [], "a model that ignored the grammar"),
    ],
    ids=["call-cut-short", "answer-cut-short", "not-json"],
)
def test_a_reply_cut_short_or_off_grammar_is_still_read(
    text: str, calls: list[tuple[str, dict[str, Any]]], shown: str
) -> None:
    outcome = read_reply(text, [CALCULATE]) or None
    if outcome is None:  # not a constrained reply at all: the gateway's ordinary parser
        assert not calls
        return
    assert [(c.name, c.args) for c in outcome.calls] == calls
    assert outcome.text == shown


def test_llama_cpp_turns_the_schema_into_a_grammar() -> None:
    """The converter llama-cpp-python's server runs on `response_format.schema`."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:
        pytest.fail("llama-cpp-python is missing (make test installs the `local` group)")
    gbnf = json_schema_to_gbnf(json.dumps(reply_schema([CALCULATE, CLOCK])))
    assert '\\"current_time\\"' in gbnf
    assert '\\"answer\\"' in gbnf
