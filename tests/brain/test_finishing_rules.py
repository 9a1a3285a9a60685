"""Finish, don't loop, rule by rule: which histories turn the next step's tools off, and
which texts are a tool call written out rather than an answer."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tether_brain.loop.finishing import Digest, ToolLoop, looks_like_call, loop_in
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.toolcalls import ToolSpec

TOOLS = [
    ToolSpec(
        "calculate",
        {"type": "object", "properties": {"expression": {"type": "string"}}, "required": []},
    ),
    ToolSpec(
        "convert_time",
        {
            "type": "object",
            "properties": {
                "time": {"type": "string"},
                "from_timezone": {"type": "string"},
                "to_timezone": {"type": "string"},
            },
        },
    ),
]
TOKYO = "Tuesday 01 December 2026, 18:00:00 in Asia/Tokyo (UTC+09:00, JST); ISO 2026-12-01T18:00:00+09:00"


class History:
    """A run's messages, built one step (calls and their results) at a time."""

    def __init__(self) -> None:
        self.messages = [ChatMessage(role="user", content="the question")]
        self._ids = 0

    def step(self, *calls: tuple[str, dict[str, Any], str]) -> History:
        records = []
        for name, arguments, _ in calls:
            self._ids += 1
            records.append(CallRecord(id=f"c{self._ids}", name=name, arguments=arguments))
        self.messages.append(ChatMessage(role="assistant", tool_calls=records))
        for record, (_, _, result) in zip(records, calls, strict=True):
            self.messages.append(
                ChatMessage(role="tool", content=result, tool_call_id=record.id, name=record.name)
            )
        return self


def test_the_same_call_again_is_a_loop() -> None:
    history = History().step(("calculate", {"expression": "2+2"}, "2+2 = 4"))
    assert loop_in(history.messages) is None
    history.step(("calculate", {"expression": "2+2"}, "2+2 = 4"))
    assert loop_in(history.messages) == ToolLoop("repeated_call", "calculate")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("calculate", {"expression": "2+2"}, "2+2 = 4"), ("calculate", {"expression": "4"})),
        (
            ("current_time", {"timezone": "Asia/Tokyo"}, TOKYO),
            (
                "convert_time",
                {
                    "time": "2026-12-01T18:00:00+09:00",
                    "from_timezone": "Asia/Tokyo",
                    "to_timezone": "UTC",
                },
            ),
        ),
    ],
)
def test_a_result_fed_back_as_an_argument_is_a_loop(
    first: tuple[str, dict[str, Any], str], second: tuple[str, dict[str, Any]]
) -> None:
    history = History().step(first).step((*second, "whatever it says"))
    assert loop_in(history.messages) == ToolLoop("result_fed_back", second[0])


@pytest.mark.parametrize(
    "steps",
    [
        # A name the listing gave is followed: a reference, not a value fed back.
        [("file_list", {"path": "."}, "notes.txt"), ("file_read", {"path": "notes.txt"}, "hi")],
        # A new computation on an earlier value is work, not a loop.
        [
            ("calculate", {"expression": "2+2"}, "2+2 = 4"),
            ("calculate", {"expression": "4*3"}, "4*3 = 12"),
        ],
        # A word both name (UTC) is no value fed back.
        [
            ("current_time", {"timezone": "Asia/Tokyo"}, TOKYO),
            ("current_time", {"timezone": "UTC"}, "… in UTC"),
        ],
        # One number of a longer text written on is no result fed back.
        [
            ("file_read", {"path": "notes.txt"}, "Meeting at 1 pm. Bring the report."),
            ("file_write", {"path": "one.txt", "content": "1"}, "wrote one.txt"),
        ],
        # A series of calls numbered by the caller: the next call repeats numbers its own
        # arguments gave the last one ('wrote 0.3-0' added only 'wrote'), not a result.
        [
            ("tagged_write", {"tag": "0.3-0", "seconds": 0.3}, "wrote 0.3-0"),
            ("tagged_write", {"tag": "0.3-1", "seconds": 0.3}, "wrote 0.3-1"),
        ],
        [
            ("tagged_write", {"tag": "1.0-0", "seconds": 0.5}, "wrote 1.0-0"),
            ("tagged_write", {"tag": "1.0-1", "seconds": 0.5}, "wrote 1.0-1"),
        ],
        # Different failures, or one failure after a success, are not repeated failures.
        [
            ("current_time", {"timezone": "Mars"}, "FAILED: unknown_timezone: 'Mars'"),
            ("file_read", {"path": "a"}, "FAILED: not_found: a"),
        ],
    ],
)
def test_ordinary_next_steps_are_no_loop(steps: list[tuple[str, dict[str, Any], str]]) -> None:
    history = History()
    for step in steps:
        history.step(step)
    assert loop_in(history.messages) is None


def test_the_same_failure_again_is_a_loop() -> None:
    history = History().step(
        ("current_time", {"timezone": "London"}, "FAILED: unknown_timezone: 'London' is not…")
    )
    assert loop_in(history.messages) is None
    history.step(("current_time", {"timezone": "New York"}, "FAILED: unknown_timezone: 'New…"))
    assert loop_in(history.messages) == ToolLoop("repeated_failure", "current_time")


def test_an_answer_or_a_user_message_since_the_calls_starts_afresh() -> None:
    history = History().step(("calculate", {"expression": "2+2"}, "2+2 = 4"))
    history.step(("calculate", {"expression": "2+2"}, "2+2 = 4"))
    history.messages.append(ChatMessage(role="user", content="and 3+3?"))
    assert loop_in(history.messages) is None


def _random_step(rng: random.Random, history: History) -> None:
    """One step of a run that loops now and then: sums, their results fed back, the same
    call again, failures of one code, a user message or an answer between steps."""
    a, b = rng.randint(1, 30), rng.randint(1, 30)
    calls = [
        ("calculate", {"expression": f"{a}+{b}"}, f"{a}+{b} = {a + b}"),
        ("calculate", {"expression": str(rng.randint(2, 60))}, "ok"),
        (
            "current_time",
            {"timezone": rng.choice(["Mars", "Asia/Tokyo"])},
            rng.choice([TOKYO, "FAILED: unknown_timezone: no"]),
        ),
        ("file_read", {"path": f"f{rng.randint(1, 4)}.txt"}, "x" * rng.choice([10, 500])),
    ]
    history.step(*rng.sample(calls, rng.randint(1, 2)))
    if rng.random() < 0.1:
        history.messages.append(ChatMessage(role=rng.choice(["user", "assistant"]), content="…"))


class CountingDigest(Digest):
    read = 0

    def _read(self, message: ChatMessage) -> None:
        CountingDigest.read += 1
        super()._read(message)


def test_reading_on_from_the_last_step_finds_what_reading_it_all_finds() -> None:
    """A run's digest read on step after step (each message read once) finds the same
    loops as a fresh reading of the whole history (a run's history only grows), also when
    given another history (it starts again). 40 random runs of 60 steps."""
    kinds = set()
    for seed in range(40):
        rng = random.Random(seed)
        history, kept = History(), CountingDigest()
        CountingDigest.read = 0
        for n in range(60):
            _random_step(rng, history)
            if n == 40:  # another history (new objects), an early call in it changed
                history.messages = [m.model_copy() for m in history.messages]
                first = history.messages[1]
                other = {"expression": "rewritten"}
                calls = [c.model_copy(update={"arguments": other}) for c in first.tool_calls]
                history.messages[1] = first.model_copy(update={"tool_calls": calls})
                history.step((first.tool_calls[0].name, first.tool_calls[0].arguments, "again"))
            found = loop_in(history.messages)
            assert loop_in(history.messages, kept) == found
            kinds.add(found.kind if found is not None else None)
        # Each message once, and again after the swap (fresh readings are not counted).
        assert CountingDigest.read <= 2 * len(history.messages)
    assert kinds == {None, "repeated_call", "result_fed_back", "repeated_failure"}


@pytest.mark.parametrize(
    "text",
    [
        '```tool\n{"name": "calculate", "args": {"expression": "4"}}\n```',
        '{"name": "calculate", "arguments": {"expression": "4"}}',
        '<tool_call>{"name": "convert_time", "arguments": {"time": "09:00"}}</tool_call>',
        '{"expression": "2 + 2"}',
        '```json\n{"time": "09:00", "to_timezone": "UTC"}\n```',
        '```tool\n{"name": "teleport"}\n```',  # a marker with no usable call
    ],
)
def test_a_call_written_out_is_no_answer(text: str) -> None:
    assert looks_like_call(text, TOOLS)


@pytest.mark.parametrize(
    "text",
    [
        "2 + 2 is 4.",
        "It is 18:00 in Tokyo.",
        '{"answer": 4}',  # JSON, but no tool's arguments
        "Use calculate for sums next time.",
    ],
)
def test_an_answer_is_an_answer(text: str) -> None:
    assert not looks_like_call(text, TOOLS)
