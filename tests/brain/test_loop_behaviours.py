"""Every rule of the loop, with a scripted model through the real services."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether_client import TetherClient
from tether_common.supervisor import Supervisor
from tether_common.testing import RunScript, Turn, call, event_data, say, write_script
from tether_common.testing import event_data as kinds

pytestmark = pytest.mark.e2e


async def test_tool_then_answer(run_script: RunScript) -> None:
    run, events = await run_script(
        [[call("current_time", timezone="Asia/Tokyo")], say("It is late in Tokyo.")]
    )
    assert run.status == "completed"
    assert run.answer == "It is late in Tokyo."
    result = kinds(events, "tool.result")[0]
    assert result["ok"] is True
    assert "Asia/Tokyo" in result["content"]
    assert [s.kind for s in run.steps] == ["model", "tool", "model"]


async def test_step_ceiling_with_calls_to_the_end_ends_no_answer(run_script: RunScript) -> None:
    # The last step's call and the tools-off round after it (finishing.py): no answer,
    # and never the text said before a call.
    looping = [
        [{"kind": "chunk", "text": f"try {i}"}, call("current_time", timezone=z)]
        for i, z in enumerate(["UTC", "Asia/Tokyo", "Europe/Paris", "Europe/Oslo"])
    ]
    run, events = await run_script(looping, max_steps=3)
    assert run.status == "stopped"
    assert run.stop_reason == "no_answer"
    assert run.answer is None
    assert len(kinds(events, "tool.result")) == 2


async def test_one_step_turns_tools_off(run_script: RunScript) -> None:
    turns = [[call("current_time", timezone="UTC")], say("I cannot check the time in one step.")]
    run, events = await run_script(turns, max_steps=1)
    assert run.status == "completed"
    assert run.answer == "I cannot check the time in one step."
    assert not kinds(events, "tool.call")


async def test_identical_calls_are_answered_from_the_cache(run_script: RunScript) -> None:
    run, events = await run_script(
        [
            [call("current_time", timezone="UTC")],
            [call("current_time", timezone="UTC")],
            say("done"),
        ]
    )
    assert run.status == "completed"
    results = kinds(events, "tool.result")
    assert [r["cached"] for r in results] == [False, True]
    assert results[0]["content"] == results[1]["content"]
    assert {"kind": "repeated_call", "name": "current_time", "step": 2} in kinds(events, "guard")


async def test_unknown_tool_gets_one_correction(run_script: RunScript) -> None:
    run, events = await run_script([[call("teleport", to="moon")], say("Sorry, I answer plainly.")])
    assert run.status == "completed"
    assert run.answer == "Sorry, I answer plainly."
    guard = kinds(events, "guard")[0]
    assert guard["kind"] == "unusable_call"


async def test_second_unusable_call_ends_as_plain_text(run_script: RunScript) -> None:
    turns = [[call("teleport")], [{"kind": "chunk", "text": "still trying"}, call("teleport")]]
    run, _ = await run_script(turns)
    assert run.status == "completed"
    assert run.answer == "still trying"


async def test_reasoning_without_an_answer_is_nudged_once(run_script: RunScript) -> None:
    turns = [[{"kind": "thinking", "text": "hmm, the user wants..."}], say("Here is the answer.")]
    run, events = await run_script(turns)
    assert run.answer == "Here is the answer."
    assert {"kind": "no_answer", "step": 1} in kinds(events, "guard")
    assert any(s.get("thinking") for s in kinds(events, "step"))


async def test_live_question_without_evidence_gets_one_reminder(run_script: RunScript) -> None:
    turns = [say("It is sunny and 21 degrees."), say("I can't check live weather from here.")]
    run, events = await run_script(turns, prompt="What's the weather in Oslo right now?")
    assert run.answer == "I can't check live weather from here."
    assert {"kind": "live_data", "step": 1} in kinds(events, "guard")


async def test_admitting_no_live_data_needs_no_reminder(run_script: RunScript) -> None:
    run, events = await run_script([say("I cannot check the weather now.")], prompt="weather now?")
    assert run.status == "completed"
    assert not kinds(events, "guard")


async def test_promise_without_a_call_is_flagged(run_script: RunScript) -> None:
    turns = [say("I'll check the time for you."), say("It is noon UTC, per my last check.")]
    run, events = await run_script(turns, prompt="tell me a fact")
    assert run.status == "completed"
    assert {"kind": "promised_action", "step": 1} in kinds(events, "guard")


async def test_research_without_retrieval_is_coerced_once(run_script: RunScript) -> None:
    run, events = await run_script([say("Paris."), say("Paris, as far as I know.")], research=True)
    assert run.answer == "Paris, as far as I know."
    assert {"kind": "no_retrieval", "step": 1} in kinds(events, "guard")


async def test_calls_in_one_step_run_together_and_pair_by_id(run_script: RunScript) -> None:
    first, second = (
        call("current_time", timezone="Asia/Tokyo"),
        call("convert_time", time="09:00", from_timezone="UTC", to_timezone="Europe/Paris"),
    )
    _, events = await run_script([[first, second], say("ok")])
    results = kinds(events, "tool.result")
    assert [r["call_id"] for r in results] == [first["id"], second["id"]]
    assert all(r["ok"] for r in results)


async def test_more_than_three_calls_are_not_run(run_script: RunScript) -> None:
    calls = [
        call("current_time", timezone=z)
        for z in ("UTC", "Asia/Tokyo", "Europe/Paris", "Europe/Oslo")
    ]
    _, events = await run_script([calls, say("ok")])
    results = kinds(events, "tool.result")
    assert [r["error_code"] for r in results] == [None, None, None, "too_many_calls"]


# What no repair at the edge can read as a zone (a number or a boolean is read as its text,
# a known place as its zone): the strict schema check at the gates refuses it.
@pytest.mark.parametrize("zone", [{"name": "UTC"}, ["UTC", "Asia/Tokyo"]])
async def test_bad_arguments_are_a_schema_refusal(run_script: RunScript, zone: object) -> None:
    _, events = await run_script([[call("current_time", timezone=zone)], say("ok")])
    result = kinds(events, "tool.result")[0]
    assert result["error_code"] == "schema_invalid"
    assert result["content"].startswith("FAILED: schema_invalid")


async def test_unknown_timezone_is_a_tool_failure_the_model_reads(run_script: RunScript) -> None:
    run, events = await run_script(
        [[call("current_time", timezone="Mars/Olympus")], say("no such zone")]
    )
    assert kinds(events, "tool.result")[0]["error_code"] == "unknown_timezone"
    assert run.status == "completed"


async def test_tool_call_budget(run_script: RunScript) -> None:
    turns = [
        [call("current_time", timezone="UTC")],
        [call("current_time", timezone="Asia/Tokyo")],
        say("ok"),
    ]
    _, events = await run_script(turns, max_tool_calls=1)
    codes = [r["error_code"] for r in kinds(events, "tool.result")]
    assert codes == [None, "budget_exhausted"]


async def test_cost_budget_stops_before_the_next_model_call(run_script: RunScript) -> None:
    usage = {"kind": "usage", "input_tokens": 10, "output_tokens": 5, "cost": 1.0}
    turns = [
        [usage, call("current_time", timezone="UTC")],
        [usage, call("current_time", timezone="Asia/Tokyo")],
        say("never"),
    ]
    run, events = await run_script(turns, max_cost=1.5)
    assert run.status == "stopped"
    assert run.stop_reason == "budget_exhausted"
    assert run.usage.cost == pytest.approx(2.0)
    assert {"kind": "budget_exhausted", "step": 2} in kinds(events, "guard")


async def test_guide_only_offers_no_tools_and_rejects_calls(run_script: RunScript) -> None:
    turns = [
        [{"kind": "chunk", "text": "Open the settings page."}, call("current_time", timezone="UTC")]
    ]
    run, events = await run_script(turns, guide_only=True)
    assert run.status == "completed"
    assert run.answer == "Open the settings page."
    assert not kinds(events, "tool.call")
    assert kinds(events, "guard")[0]["kind"] == "call_rejected"


async def test_model_error_fails_the_run_with_its_code(run_script: RunScript) -> None:
    run, _ = await run_script([[{"kind": "error", "code": "provider_auth", "message": "bad key"}]])
    assert run.status == "failed"
    assert run.stop_reason is not None
    assert "provider_auth" in run.stop_reason


async def test_stop_cancels_an_inflight_model_stream(stack: Supervisor, scripts_dir: Path) -> None:
    model = write_script(
        Path(str(scripts_dir)), [[{"pause_s": 30}, {"kind": "chunk", "text": "late"}]]
    )
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("wait", provider="scripted", model=model)
        await asyncio.sleep(0.5)
        stopped = await client.stop_run(accepted.run_id)
        assert stopped.status in ("queued", "running")
        events = [e async for e in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    assert run.status == "stopped"
    assert run.stop_reason == "stop_requested"
    assert events[-1].kind == "run.end"


async def test_queued_message_is_delivered_at_the_answer_boundary(
    stack: Supervisor, scripts_dir: Path
) -> None:
    turns: list[Turn] = [
        [{"pause_s": 1.0}, {"kind": "chunk", "text": "first answer"}],
        say("second answer"),
    ]
    model = write_script(scripts_dir, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("first", provider="scripted", model=model)
        queued = await client.queue_message(accepted.run_id, "and a follow-up")
        assert queued.status == "running"
        _ = [e async for e in client.events(accepted.run_id)]
        run = await client.get_run(accepted.run_id)
    assert run.status == "completed"
    assert run.answer == "second answer"
    assert [s.text for s in run.steps if s.kind == "model"] == ["first answer", "second answer"]


async def test_a_message_for_an_ended_run_is_refused(
    run_script: RunScript, stack: Supervisor
) -> None:
    run, _ = await run_script([say("done")])
    async with TetherClient(stack.child("brain").url) as client:
        with pytest.raises(Exception, match="has ended"):
            await client.queue_message(run.run_id, "too late")


@pytest.mark.parametrize(
    ("switch", "tool", "arguments"),
    [
        ("allow_shell", "shell", {"command": "ls"}),
        ("allow_web", "web_fetch", {"url": "https://example.com/"}),
    ],
)
async def test_switches_turn_tool_families_off(
    run_script: RunScript, switch: str, tool: str, arguments: dict[str, str]
) -> None:
    run, events = await run_script([[call(tool, **arguments)], say("ok")], **{switch: False})
    assert run.status == "completed"
    assert event_data(events, "tool.result")[0]["error_code"] == "switched_off"


async def test_active_time_limit(run_script: RunScript) -> None:
    slow = [{"pause_s": 1.2}, call("current_time", timezone="UTC")]
    run, events = await run_script([slow, slow, say("never")], max_seconds=1.0)
    assert (run.status, run.stop_reason) == ("stopped", "max_seconds")
    assert {"kind": "max_seconds", "step": 1} in event_data(events, "guard")


async def test_token_budget_with_reported_usage(run_script: RunScript) -> None:
    usage = {"kind": "usage", "input_tokens": 80, "output_tokens": 20}
    turns = [
        [usage, call("current_time", timezone=z)] for z in ("UTC", "Asia/Tokyo", "Europe/Oslo")
    ]
    run, _ = await run_script([*turns, say("never")], max_tokens=150)
    assert (run.status, run.stop_reason) == ("stopped", "budget_exhausted")
    assert run.usage.input_tokens + run.usage.output_tokens == 200
