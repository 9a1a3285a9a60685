"""Every rule of the loop, in process (`tether_brain.testing.Harness`): the same scripts as
through the real services, the tools-runner's own executor and built-in tools, a memory
store written and read by the PostgreSQL store's code, and a fake clock. What only the
processes can show (a tool through the runner over the bus, a stop cutting a model
stream, a message queued over the API) stays in test_loop_behaviours.py."""

from __future__ import annotations

from typing import Any

import pytest

from tether_brain.testing import Harness
from tether_common.testing import call, say


async def test_step_ceiling_with_calls_to_the_end_ends_no_answer(harness: Harness) -> None:
    # The last step's call and the tools-off round after it (finishing.py): no answer,
    # and never the text said before a call.
    looping = [
        [{"kind": "chunk", "text": f"try {i}"}, call("current_time", timezone=z)]
        for i, z in enumerate(["UTC", "Asia/Tokyo", "Europe/Paris", "Europe/Oslo"])
    ]
    run = await harness.run(looping, max_steps=3)
    assert (run.state.status, run.state.stop_reason) == ("stopped", "no_answer")
    assert run.state.answer is None
    assert len(run.data("tool.result")) == 2


async def test_one_step_turns_tools_off(harness: Harness) -> None:
    turns = [[call("current_time", timezone="UTC")], say("I cannot check the time in one step.")]
    run = await harness.run(turns, max_steps=1)
    assert run.state.status == "completed"
    assert run.state.answer == "I cannot check the time in one step."
    assert not run.data("tool.call")
    assert harness.model.requests[0].tools == []  # nothing offered on the only step


async def test_identical_calls_are_answered_from_the_cache(harness: Harness) -> None:
    run = await harness.run(
        [
            [call("current_time", timezone="UTC")],
            [call("current_time", timezone="UTC")],
            say("done"),
        ]
    )
    assert run.state.status == "completed"
    results = run.data("tool.result")
    assert [r["cached"] for r in results] == [False, True]
    assert results[0]["content"] == results[1]["content"]
    assert {"kind": "repeated_call", "name": "current_time", "step": 2} in run.data("guard")
    assert len(harness.runner.sent) == 1  # the second answer never reached the runner


async def test_unknown_tool_gets_one_correction(harness: Harness) -> None:
    run = await harness.run([[call("teleport", to="moon")], say("Sorry, I answer plainly.")])
    assert run.state.status == "completed"
    assert run.state.answer == "Sorry, I answer plainly."
    assert run.data("guard")[0]["kind"] == "unusable_call"


async def test_second_unusable_call_ends_as_plain_text(harness: Harness) -> None:
    turns = [[call("teleport")], [{"kind": "chunk", "text": "still trying"}, call("teleport")]]
    run = await harness.run(turns)
    assert run.state.status == "completed"
    assert run.state.answer == "still trying"


async def test_reasoning_without_an_answer_is_nudged_once(harness: Harness) -> None:
    turns = [[{"kind": "thinking", "text": "hmm, the user wants..."}], say("Here is the answer.")]
    run = await harness.run(turns)
    assert run.state.answer == "Here is the answer."
    assert {"kind": "no_answer", "step": 1} in run.data("guard")
    assert any(s.get("thinking") for s in run.data("step"))


async def test_live_question_without_evidence_gets_one_reminder(harness: Harness) -> None:
    turns = [say("It is sunny and 21 degrees."), say("I can't check live weather from here.")]
    run = await harness.run(turns, prompt="What's the weather in Oslo right now?")
    assert run.state.answer == "I can't check live weather from here."
    assert {"kind": "live_data", "step": 1} in run.data("guard")


async def test_admitting_no_live_data_needs_no_reminder(harness: Harness) -> None:
    run = await harness.run([say("I cannot check the weather now.")], prompt="weather now?")
    assert run.state.status == "completed"
    assert not run.data("guard")


async def test_promise_without_a_call_is_flagged(harness: Harness) -> None:
    turns = [say("I'll check the time for you."), say("It is noon UTC, per my last check.")]
    run = await harness.run(turns, prompt="tell me a fact")
    assert run.state.status == "completed"
    assert {"kind": "promised_action", "step": 1} in run.data("guard")


async def test_research_without_retrieval_is_coerced_once(harness: Harness) -> None:
    run = await harness.run([say("Paris."), say("Paris, as far as I know.")], research=True)
    assert run.state.answer == "Paris, as far as I know."
    assert {"kind": "no_retrieval", "step": 1} in run.data("guard")


async def test_calls_in_one_step_run_together_and_pair_by_id(harness: Harness) -> None:
    first, second = (
        call("current_time", timezone="Asia/Tokyo"),
        call("convert_time", time="09:00", from_timezone="UTC", to_timezone="Europe/Paris"),
    )
    run = await harness.run([[first, second], say("ok")])
    results = run.data("tool.result")
    assert [r["call_id"] for r in results] == [first["id"], second["id"]]
    assert all(r["ok"] for r in results)


async def test_more_than_three_calls_are_not_run(harness: Harness) -> None:
    calls = [
        call("current_time", timezone=z)
        for z in ("UTC", "Asia/Tokyo", "Europe/Paris", "Europe/Oslo")
    ]
    run = await harness.run([calls, say("ok")])
    codes = [r["error_code"] for r in run.data("tool.result")]
    assert codes == [None, None, None, "too_many_calls"]
    assert len(harness.runner.sent) == 3


# What no repair at the edge can read as a zone (a number or a boolean is read as its text,
# a known place as its zone): the strict schema check at the gates refuses it.
@pytest.mark.parametrize("zone", [{"name": "UTC"}, ["UTC", "Asia/Tokyo"]])
async def test_bad_arguments_are_a_schema_refusal(harness: Harness, zone: object) -> None:
    run = await harness.run([[call("current_time", timezone=zone)], say("ok")])
    result = run.data("tool.result")[0]
    assert result["error_code"] == "schema_invalid"
    assert result["content"].startswith("FAILED: schema_invalid")
    assert not harness.runner.sent


async def test_unknown_timezone_is_a_tool_failure_the_model_reads(harness: Harness) -> None:
    run = await harness.run([[call("current_time", timezone="Mars/Olympus")], say("no such zone")])
    assert run.data("tool.result")[0]["error_code"] == "unknown_timezone"
    assert run.state.status == "completed"
    tool_message = next(m for m in run.state.messages if m.role == "tool")
    assert tool_message.content.startswith("FAILED: unknown_timezone")


async def test_tool_call_budget(harness: Harness) -> None:
    turns = [
        [call("current_time", timezone="UTC")],
        [call("current_time", timezone="Asia/Tokyo")],
        say("ok"),
    ]
    run = await harness.run(turns, max_tool_calls=1)
    codes = [r["error_code"] for r in run.data("tool.result")]
    assert codes == [None, "budget_exhausted"]


async def test_cost_budget_stops_before_the_next_model_call(harness: Harness) -> None:
    usage = {"kind": "usage", "input_tokens": 10, "output_tokens": 5, "cost": 1.0}
    turns = [
        [usage, call("current_time", timezone="UTC")],
        [usage, call("current_time", timezone="Asia/Tokyo")],
        say("never"),
    ]
    run = await harness.run(turns, max_cost=1.5)
    assert (run.state.status, run.state.stop_reason) == ("stopped", "budget_exhausted")
    assert run.state.usage.cost == pytest.approx(2.0)
    assert {"kind": "budget_exhausted", "step": 2} in run.data("guard")
    assert len(harness.model.requests) == 2  # the third turn was never asked


async def test_guide_only_offers_no_tools_and_rejects_calls(harness: Harness) -> None:
    turns = [
        [{"kind": "chunk", "text": "Open the settings page."}, call("current_time", timezone="UTC")]
    ]
    run = await harness.run(turns, guide_only=True)
    assert run.state.status == "completed"
    assert run.state.answer == "Open the settings page."
    assert not run.data("tool.call")
    assert run.data("guard")[0]["kind"] == "call_rejected"


@pytest.mark.parametrize(
    ("code", "retryable"), [("provider_auth", False), ("script_exhausted", False)]
)
async def test_model_error_fails_the_run_with_its_code(
    harness: Harness, code: str, retryable: bool
) -> None:
    error = {"kind": "error", "code": code, "message": "bad", "retryable": retryable}
    run = await harness.run([[error]])
    assert run.state.status == "failed"
    assert run.state.stop_reason is not None
    assert code in run.state.stop_reason


async def test_a_script_that_runs_out_fails_the_run(harness: Harness) -> None:
    run = await harness.run([[call("current_time", timezone="UTC")]])
    assert run.state.status == "failed"
    assert "script_exhausted" in (run.state.stop_reason or "")


@pytest.mark.parametrize(
    ("switch", "tool", "arguments"),
    [
        ("allow_shell", "shell", {"command": "ls"}),
        ("allow_web", "web_fetch", {"url": "https://example.com/"}),
    ],
)
async def test_switches_turn_tool_families_off(
    harness: Harness, switch: str, tool: str, arguments: dict[str, str]
) -> None:
    switches: dict[str, Any] = {switch: False}
    run = await harness.run([[call(tool, **arguments)], say("ok")], **switches)
    assert run.state.status == "completed"
    assert run.data("tool.result")[0]["error_code"] == "switched_off"
    assert not harness.runner.sent


async def test_active_time_limit(harness: Harness) -> None:
    # Each turn takes 1.2 s on the fake clock: the limit is met after the first step.
    slow = [{"pause_s": 1.2}, call("current_time", timezone="UTC")]
    run = await harness.run([slow, slow, say("never")], max_seconds=1.0)
    assert (run.state.status, run.state.stop_reason) == ("stopped", "max_seconds")
    assert {"kind": "max_seconds", "step": 1} in run.data("guard")
    assert run.state.active_seconds == pytest.approx(1.2)


async def test_token_budget_with_reported_usage(harness: Harness) -> None:
    usage = {"kind": "usage", "input_tokens": 80, "output_tokens": 20}
    turns = [
        [usage, call("current_time", timezone=z)] for z in ("UTC", "Asia/Tokyo", "Europe/Oslo")
    ]
    run = await harness.run([*turns, say("never")], max_tokens=150)
    assert (run.state.status, run.state.stop_reason) == ("stopped", "budget_exhausted")
    assert run.state.usage.input_tokens + run.state.usage.output_tokens == 200


async def test_queued_message_is_delivered_at_the_answer_boundary(harness: Harness) -> None:
    state = harness.prepare(harness.model.add([say("first answer"), say("second answer")]), "q")
    await harness.store.create(state, owner="replica", lease_s=60.0)
    await harness.store.queue_message(state.run_id, "and a follow-up")
    run = await harness.advance(state)
    assert (run.state.status, run.state.answer) == ("completed", "second answer")
    assert [s.text for s in run.state.steps if s.kind == "model"] == [
        "first answer",
        "second answer",
    ]
    assert [m.content for m in run.state.messages if m.role == "user"][-1] == "and a follow-up"


async def test_events_are_numbered_once_and_end_with_the_run(harness: Harness) -> None:
    run = await harness.run([[call("current_time", timezone="UTC")], say("ok")])
    seqs = [e.seq for e in run.events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert run.events[0].kind == "run.start"
    assert run.events[-1].kind == "run.end"
    assert [s.kind for s in run.state.steps] == ["model", "tool", "model"]


async def test_an_event_that_makes_a_run_notice_is_published_twice(harness: Harness) -> None:
    """On the run's subject for its followers, and on its notable subject for the approvals
    service (whose consumer the server then hands nothing else)."""
    run = await harness.run([[call("current_time", timezone="UTC")], say("ok")])
    notable = [e for e in harness.events.notable if e.run_id == run.state.run_id]
    assert [e.kind for e in notable] == ["run.end"]
    assert notable[0] == run.events[-1]
