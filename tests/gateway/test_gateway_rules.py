"""The offline rules planner (issue 29, item 3): arithmetic through `calculate`, the time
somewhere through `current_time`, a clock time between places through `convert_time`,
follow-ups read with the conversation, and a plain answer for what it cannot do. Each
planned call is run by the real tool, so a call the tool would refuse fails here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    OfferedToolSpec,
    ToolCallEvent,
)
from tether_gateway.providers.rules import LABEL, RulesPlanner, plan
from tether_tools_runner.tools.calculate import calculate
from tether_tools_runner.tools.clock import convert_time, current_time

TOOLS = {"calculate": calculate, "current_time": current_time, "convert_time": convert_time}
OFFERED = [OfferedToolSpec(name=name, description=name, parameters={}) for name in TOOLS]


def request(*turns: str, tools: list[OfferedToolSpec] = OFFERED) -> GenerateRequest:
    """A conversation of user requests, each but the last answered."""
    messages = [ChatMessage(role="system", content="You are Tether.")]
    for index, text in enumerate(turns):
        messages.append(ChatMessage(role="user", content=text))
        if index < len(turns) - 1:
            messages.append(ChatMessage(role="assistant", content=f"{LABEL} an answer"))
    return GenerateRequest(run_id="run_rules", provider="rules", messages=messages, tools=tools)


def calls_of(req: GenerateRequest) -> list[ToolCallEvent]:
    planned = plan(req)
    assert isinstance(planned, list), planned
    return planned


def run(call: ToolCallEvent) -> str:
    return asyncio.run(TOOLS[call.name](dict(call.arguments)))


def answered(req: GenerateRequest, calls: list[ToolCallEvent], results: list[str]) -> str:
    """The planner's answer once the tools have answered its calls."""
    records = [CallRecord(id=c.id, name=c.name, arguments=c.arguments) for c in calls]
    messages = [*req.messages, ChatMessage(role="assistant", tool_calls=records)]
    messages += [
        ChatMessage(role="tool", content=result, tool_call_id=call.id, name=call.name)
        for call, result in zip(calls, results, strict=True)
    ]
    final = plan(req.model_copy(update={"messages": messages}))
    assert isinstance(final, ChunkEvent), final
    return final.text


@pytest.mark.parametrize(
    ("prompt", "value"),
    [
        ("what is 17*23?", "391"),
        ("17 * 23", "391"),
        ("What's 17 times 23?", "391"),
        ("what is 12 x 3?", "36"),
        ("calculate (2+3)*4", "20"),
        ("what is 2^10?", "1024"),
        ("what is 15% of 80?", "12"),
        ("10 divided by 4", "2.5"),
        ("what is 1,000,000 / 4?", "250000"),
        ("what is the square root of 144?", "12"),
        ("sqrt(2) * sqrt(2) > 1.99", "True"),
        ("what is -5 + 3?", "-2"),
    ],
)
def test_arithmetic_is_worked_out_by_calculate(prompt: str, value: str) -> None:
    req = request(prompt)
    [call] = calls_of(req)
    assert call.name == "calculate"
    result = run(call)
    assert result.rsplit(" = ", 1)[-1] in (value, f"{value}.0"), (call.arguments, result)
    text = answered(req, [call], [result])
    assert text == f"{LABEL} {result}"


@pytest.mark.parametrize(
    ("prompt", "zones"),
    [
        ("what time is it in Tokyo?", ["Asia/Tokyo"]),
        ("What's the time in New York?", ["America/New_York"]),
        ("what time is it in Tokyo and in Paris?", ["Asia/Tokyo", "Europe/Paris"]),
        ("what day is it today?", ["UTC"]),
    ],
)
def test_the_time_somewhere_is_read_from_the_clock(prompt: str, zones: list[str]) -> None:
    req = request(prompt)
    calls = calls_of(req)
    assert [(c.name, c.arguments) for c in calls] == [
        ("current_time", {"timezone": zone}) for zone in zones
    ]
    results = [run(call) for call in calls]
    text = answered(req, calls, results)
    assert all(zone in text for zone in zones), text


@pytest.mark.parametrize(
    ("prompt", "arguments"),
    [
        (
            "what is 9am in London in Tokyo?",
            {"time": "9am", "from_timezone": "Europe/London", "to_timezone": "Asia/Tokyo"},
        ),
        (
            "convert 09:00 London to New York",
            {"time": "09:00", "from_timezone": "Europe/London", "to_timezone": "America/New_York"},
        ),
        (
            "what time is it in Tokyo when it's 3:30 pm in Paris?",
            {"time": "3:30 pm", "from_timezone": "Europe/Paris", "to_timezone": "Asia/Tokyo"},
        ),
    ],
)
def test_a_time_is_converted_between_places(prompt: str, arguments: dict[str, Any]) -> None:
    [call] = calls_of(request(prompt))
    assert (call.name, call.arguments) == ("convert_time", arguments)
    assert arguments["to_timezone"] in run(call)


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (["what time is it in Tokyo?", "and in Paris?"], ("current_time", "Europe/Paris")),
        (["what time is it in Tokyo?", "Paris?"], ("current_time", "Europe/Paris")),
        (
            ["what time is it in Tokyo?", "and in Rome?", "what about Lima?"],
            ("current_time", "America/Lima"),
        ),
        (["what is 9am in London in Tokyo?", "and in Lima?"], ("convert_time", "America/Lima")),
        (["what is 17*23?", "and times 3?"], ("calculate", "(17*23) * 3")),
        (["what is 17*23?", "and times 2?", "and plus 1"], ("calculate", "((17*23) * 2) + 1")),
        (["what time is it in Tokyo?", "what is 17*23?"], ("calculate", "17*23")),
    ],
)
def test_a_follow_up_is_read_with_the_conversation(
    turns: list[str], expected: tuple[str, str]
) -> None:
    [call] = calls_of(request(*turns))
    assert call.name == expected[0]
    assert expected[1] in call.arguments.values(), call.arguments
    run(call)  # the tool takes it


WORKSPACE_TOOLS = [
    OfferedToolSpec(name=name, description=name, parameters={})
    for name in ("file_read", "file_list", "file_search")
]


@pytest.mark.parametrize(
    ("prompt", "name", "arguments"),
    [
        ("show me notes.txt", "file_read", {"path": "notes.txt"}),
        ("What is in config.ini?", "file_read", {"path": "config.ini"}),
        ("read src/main.py", "file_read", {"path": "src/main.py"}),
        ("open report-2024.csv", "file_read", {"path": "report-2024.csv"}),
        ("list the files", "file_list", {"path": "."}),
        ("list the files in src", "file_list", {"path": "src"}),
        ("what files are in reports/?", "file_list", {"path": "reports"}),
        ("which files mention whale?", "file_search", {"pattern": "whale"}),
        ("search the files for TODO", "file_search", {"pattern": "TODO"}),
        ("find 'port=' in the files", "file_search", {"pattern": "port="}),
    ],
)
def test_the_workspace_is_read_with_the_file_tools(
    prompt: str, name: str, arguments: dict[str, Any]
) -> None:
    """The default agent reads the workspace without asking (issue 27); the offline
    planner is how a first run shows it, so it reads, lists and searches too."""
    req = request(prompt, tools=[*OFFERED, *WORKSPACE_TOOLS])
    [call] = calls_of(req)
    assert (call.name, dict(call.arguments)) == (name, arguments)
    assert "port=8080" in answered(req, [call], ["config.ini:1: port=8080"])


@pytest.mark.parametrize(
    "prompt", ["what is 3.5 * 2?", "what time is it in Tokyo?", "write notes.txt for me"]
)
def test_a_number_or_a_write_is_not_read_as_a_file(prompt: str) -> None:
    planned = plan(request(prompt, tools=[*OFFERED, *WORKSPACE_TOOLS]))
    assert not isinstance(planned, list) or planned[0].name not in {
        "file_read",
        "file_list",
        "file_search",
    }, planned


@pytest.mark.parametrize(
    "turns",
    [
        ["write me a poem about the sea"],
        ["hello"],
        ["what is 42?"],
        ["what is 17*23?", "and in Paris?"],  # no time asked before: not guessed
        ["and in Paris?"],
    ],
)
def test_what_it_cannot_do_is_said_plainly(turns: list[str]) -> None:
    planned = plan(request(*turns))
    assert isinstance(planned, ChunkEvent), planned
    assert planned.text.startswith(LABEL)
    assert "cannot answer that" in planned.text
    assert "what is 17*23?" in planned.text  # says what it can do instead


def test_a_tool_not_offered_is_named_not_guessed() -> None:
    planned = plan(request("what is 17*23?", tools=OFFERED[1:]))
    assert isinstance(planned, ChunkEvent)
    assert "calculate" in planned.text
    assert "not offered" in planned.text


def test_a_failed_tool_is_said_as_such() -> None:
    req = request("what is 1/0?")
    [call] = calls_of(req)
    text = answered(req, [call], ["FAILED: math_error: division by zero"])
    assert "calculate could not answer: FAILED: math_error" in text


async def test_the_provider_streams_every_call_then_ends_with_tool_calls() -> None:
    events = [e async for e in RulesPlanner().generate(request("time in Tokyo and in Lima?"))]
    assert [e.kind for e in events] == ["tool_call", "tool_call", "usage", "done"]
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].finish_reason == "tool_calls"
