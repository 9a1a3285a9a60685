"""The text tool protocol over the `openai` adapter: a model without native tools writes
its calls as (damaged) text into a Chat Completions stream."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
import hypothesis
import pytest
from hypothesis import strategies as st

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEvent,
    OfferedToolSpec,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.toolcalls import render_tool_prompt
from tether_gateway.profiles import Profiles, ProfileStore
from tether_gateway.providers import OpenAIProvider, TextProtocol
from tether_gateway.providers.text_protocol import TextSplitter
from tether_gateway.settings import GatewaySettings
from tether_gateway.testing import FakeUpstream, Reply, collect, sse

MODEL = "tiny-instruct"


def strict(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


TOOLS = [
    OfferedToolSpec(
        name="get_weather",
        description="Weather in a city.",
        parameters=strict({"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"]),
    ),
    OfferedToolSpec(
        name="current_time",
        description="The time now in a zone.",
        parameters=strict({"timezone": {"type": "string"}}, ["timezone"]),
    ),
]


def request(**changes: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "run_id": "run-1",
        "provider": "openai",
        "model": MODEL,
        "messages": [
            ChatMessage(role="system", content="You help."),
            ChatMessage(role="user", content="Weather in Paris?"),
        ],
        "tools": TOOLS,
    }
    return GenerateRequest(**{**base, **changes})


def streamed(text: str, size: int = 4) -> Reply:
    """`text` as a Chat Completions stream, cut every `size` characters so that call
    markers and tags arrive split across chunks."""
    pieces = [
        sse({"choices": [{"index": 0, "delta": {"content": text[i : i + size]}}]})
        for i in range(0, len(text), size)
    ]
    finish = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = sse({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 20}})
    return Reply(pieces=[*pieces, finish, usage, b"data: [DONE]\n\n"])


@pytest.fixture
def provider(settings: GatewaySettings, client: httpx.AsyncClient) -> TextProtocol:
    text = settings.model_copy(update={"text_protocol_models": frozenset({MODEL})})
    profiles = Profiles(text, ProfileStore(None))
    return TextProtocol(OpenAIProvider(text, client, profiles=profiles), profiles)


def visible(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ChunkEvent))


def thought(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ThinkingEvent))


def calls(events: list[ModelEvent]) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, e.arguments) for e in events if isinstance(e, ToolCallEvent)]


def assert_no_json_in_chunks(events: list[ModelEvent]) -> None:
    for event in events:
        if isinstance(event, ChunkEvent):
            for leak in ("{", "}", "```", "<tool_call", '"name"', "'name'"):
                assert leak not in event.text, event


async def test_a_damaged_fenced_call_is_parsed_and_never_shown(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text = (
        "Let me check the weather.\n"
        "```tool\n{'name': 'get_weather', 'args': {'city': 'Paris', 'days': '2',},}\n```\n"
        "One moment."
    )
    upstream.queue(streamed(text))
    events = await collect(provider.generate(request()))
    assert_no_json_in_chunks(events)
    assert visible(events) == "Let me check the weather.\nOne moment."
    assert calls(events) == [("get_weather", {"city": "Paris", "days": 2})]
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert call.id.startswith("call_")
    assert events[-2:] == [
        UsageEvent(input_tokens=50, output_tokens=20),
        DoneEvent(finish_reason="tool_calls"),
    ]


async def test_a_call_inside_think_is_ignored_and_tool_call_tags_are_read(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text = (
        "<think>Maybe ```tool\n"
        '{"name": "current_time", "args": {"timezone": "UTC"}}\n```'
        " no, weather first.</think>"
        'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    upstream.queue(streamed(text, size=3))
    events = await collect(provider.generate(request()))
    assert_no_json_in_chunks(events)
    assert calls(events) == [("get_weather", {"city": "Oslo"})]
    assert "current_time" in thought(events)
    assert "no, weather first." in thought(events)
    assert visible(events) == "Checking. "
    assert events[-1] == DoneEvent(finish_reason="tool_calls")


async def test_several_fences_with_trailing_commas_give_several_calls(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text = (
        '```tool\n{"name": "get_weather", "args": {"city": "Rome",},}\n```\n'
        '```tool\n{name: "current_time", args: {timezone: "Europe/Rome"}}\n```'
    )
    upstream.queue(streamed(text, size=5))
    events = await collect(provider.generate(request()))
    assert_no_json_in_chunks(events)
    assert visible(events) == ""
    assert calls(events) == [
        ("get_weather", {"city": "Rome"}),
        ("current_time", {"timezone": "Europe/Rome"}),
    ]
    ids = [e.id for e in events if isinstance(e, ToolCallEvent)]
    assert len(set(ids)) == 2


async def test_a_call_of_an_unknown_tool_is_an_unusable_call(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text = 'I will look it up.\n```tool\n{"name": "weather_lookup_v2", "args": {}}\n```'
    upstream.queue(streamed(text))
    events = await collect(provider.generate(request()))
    assert_no_json_in_chunks(events)
    assert visible(events) == "I will look it up.\n"
    assert calls(events) == []
    assert events[-1] == DoneEvent(finish_reason="unusable_call")


async def test_an_answer_with_a_json_example_is_shown_at_the_end(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text = 'A person record: {"name": "Ada", "born": 1815}'
    upstream.queue(streamed(text))
    events = await collect(provider.generate(request()))
    assert visible(events) == text
    assert events[-1] == DoneEvent(finish_reason="stop")


async def test_without_tools_text_streams_and_think_is_thinking(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    upstream.queue(streamed("<think>Short answer.</think>Paris is sunny.", size=2))
    events = await collect(provider.generate(request(tools=[])))
    assert thought(events) == "Short answer."
    assert visible(events) == "Paris is sunny."
    assert upstream.received[0].json()["messages"][0] == {"role": "system", "content": "You help."}


async def test_the_request_teaches_the_format_and_sends_no_native_tools(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    upstream.queue(streamed("Sunny."))
    history = [
        ChatMessage(role="system", content="You help."),
        ChatMessage(role="user", content="Weather in Paris?"),
        ChatMessage(
            role="assistant",
            content="Checking.",
            tool_calls=[CallRecord(id="call_1", name="get_weather", arguments={"city": "Paris"})],
        ),
        ChatMessage(role="tool", tool_call_id="call_1", name="get_weather", content="18C"),
        ChatMessage(role="user", content="And tomorrow?"),
    ]
    await collect(provider.generate(request(messages=history)))
    body = upstream.received[0].json()
    assert "tools" not in body
    assert "tool_choice" not in body
    assert body["messages"] == [
        # The tools lead: the stable text is the prefix a prompt cache reuses.
        {"role": "system", "content": f"{render_tool_prompt(TOOLS)}\n\nYou help."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": 'Checking.\n\n```tool\n{"name": "get_weather", "args": {"city": "Paris"}}\n```',
        },
        {
            "role": "user",
            "content": "Result of get_weather (call call_1):\n18C\n\nAnd tomorrow?",
        },
    ]


async def test_other_models_keep_native_tools(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    upstream.queue(streamed("Sunny."))
    await collect(provider.generate(request(model="big-model")))
    body = upstream.received[0].json()
    assert [tool["function"]["name"] for tool in body["tools"]] == ["get_weather", "current_time"]


@pytest.mark.parametrize("size", [1, 2, 7])
def test_the_splitter_holds_back_partial_markers_and_tags(size: int) -> None:
    text = 'Hi <THINK>hmm {"name"</THINK> there ```to'
    splitter = TextSplitter(hold_calls=True)
    pieces = []
    for i in range(0, len(text), size):
        pieces.extend(splitter.feed(text[i : i + size]))
    pieces.extend(splitter.finish())
    shown = "".join(t for kind, t in pieces if kind == "chunk")
    assert shown == "Hi  there ```to"  # an unfinished marker is text once the stream ends
    assert "".join(t for kind, t in pieces if kind == "thinking") == 'hmm {"name"'
    assert all("```" not in t for kind, t in pieces[:-1] if kind == "chunk")


async def test_closing_the_wrapped_generator_closes_the_upstream_stream(
    upstream: FakeUpstream, provider: TextProtocol
) -> None:
    text_piece = sse({"choices": [{"index": 0, "delta": {"content": "Hello there"}}]})
    upstream.queue(Reply(pieces=[text_piece], end="stall"))
    events = provider.generate(request(tools=[]))
    assert await anext(events) == ChunkEvent(text="Hello there")
    await events.aclose()
    await asyncio.wait_for(upstream.hung_up.wait(), 1)


SAMPLES = [
    'Sure. <think>a ```tool {"name": "x"}``` b</think>Now ```tool\n{"name": "get_weather"}\n``` ok',
    "<reasoning>plan</reasoning>Plain answer with <b>html</b> and a { brace.",
    'Text <tool_call>{"name": "current_time", "arguments": {}}</tool_call> tail',
]


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(sample=st.sampled_from(SAMPLES), cuts=st.lists(st.integers(0, 120), max_size=12))
def test_where_the_stream_is_cut_never_changes_the_split(sample: str, cuts: list[int]) -> None:
    def split(pieces: list[str]) -> tuple[str, str, str]:
        splitter = TextSplitter(hold_calls=True)
        out = [p for piece in pieces for p in splitter.feed(piece)] + splitter.finish()
        shown = "".join(t for kind, t in out if kind == "chunk")
        thinking = "".join(t for kind, t in out if kind == "thinking")
        return shown, thinking, splitter.held or ""

    bounds = sorted({0, len(sample), *(c for c in cuts if c < len(sample))})
    pieces = [sample[a:b] for a, b in itertools.pairwise(bounds)]
    assert split(pieces) == split([sample])
