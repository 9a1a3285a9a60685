"""Finish, don't loop, through the real services: each loop trigger turns the next step's
tools off and asks for the answer from the results; a call in a tools-off step gets one
more tools-off round, and a model that calls again ends `no_answer`, never with a call as
its answer. Then the compact prompt tier as a text-protocol model receives it (a fake
OpenAI-compatible server records each request): only the tools the question needs, as
one-line cards, and a system prompt that is the same byte for byte at every step."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether_brain.context.prompts import COMPACT_SYSTEM, after_results
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import RunScript, call, event_data, say
from tether_gateway.testing import FakeUpstream, chat_text_stream

pytestmark = pytest.mark.e2e

SMALL_MODEL = "tiny-compact-model"
GRAMMAR_MODEL = "tiny-grammar-model"
EDITOR = "editor"


@pytest.fixture(scope="module")
async def fake_model() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def profiles_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hand-written profile: the grammar model is asked as the local default asks."""
    folder = tmp_path_factory.mktemp("profiles")
    profile = {
        "provider": "openai",
        "model": GRAMMAR_MODEL,
        "tool_calling": "text",
        "prompt_tier": "compact",
        "grammar": True,
        "temperature": 0.0,
    }
    (folder / "grammar.yaml").write_text(json.dumps(profile))  # JSON is YAML
    return folder


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    """A workspace the runner's unprivileged file user can write, with a file to edit."""
    root = Path(tempfile.mkdtemp(prefix="tether-finish-"))
    try:
        root.chmod(0o777)
        (root / "todo.txt").write_text("eggs\nmilk\n")
        (root / "todo.txt").chmod(0o666)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def stack_extra_env(
    fake_model: FakeUpstream, profiles_dir: Path, workspace: Path
) -> dict[str, str]:
    return {
        "TETHER_RUNNER_WORKSPACE": str(workspace),
        "TETHER_BRAIN_WORKSPACE": str(workspace),
        "TETHER_BRAIN_AGENTS": json.dumps(
            {EDITOR: {"grants": ["file_read", "file_edit#noapproval"]}}
        ),
        # The read taints the run, so the edit asks: an operator's rule says yes.
        "TETHER_APPROVALS_RULES": json.dumps(
            [{"name": "edits", "tool": "file_edit", "answer": "allow_once"}]
        ),
        "TETHER_GATEWAY_PROFILES_DIR": str(profiles_dir),
        "TETHER_GATEWAY_OPENAI_BASE_URL": f"{fake_model.url}/v1",
        "TETHER_GATEWAY_TEXT_PROTOCOL_MODELS": SMALL_MODEL,
        # A scripted reply is used once: a retry would hand the next reply out.
        "TETHER_GATEWAY_RETRY_ATTEMPTS": "0",
        "TETHER_BRAIN_PROMPT_TIERS": json.dumps({SMALL_MODEL: "compact"}),
    }


def guards(events: list[RunEvent], kind: str) -> list[dict[str, Any]]:
    return [g for g in event_data(events, "guard") if g["kind"] == kind]


@pytest.mark.parametrize(
    ("first", "second", "trigger"),
    [
        (
            call("calculate", expression="2+2"),
            call("calculate", expression="2+2"),
            "repeated_call",
        ),
        (
            call("calculate", expression="2+2"),
            call("calculate", expression="4"),
            "result_fed_back",
        ),
        (
            call("current_time", timezone="Mars/Olympus"),
            call("current_time", timezone="Moon/Tranquility"),
            "repeated_failure",
        ),
    ],
)
async def test_a_loop_turns_the_next_steps_tools_off(
    run_script: RunScript, first: dict[str, Any], second: dict[str, Any], trigger: str
) -> None:
    # The third turn calls once more: in a tools-off step that call is not run, and the
    # round after it (asked for the answer from the results) answers.
    third = call("calculate", expression="1+1")
    run, events = await run_script([[first], [second], [third], say("It is 4.")])
    assert (run.status, run.answer) == ("completed", "It is 4."), run.stop_reason
    assert guards(events, "loop_broken") == [
        {"kind": "loop_broken", "step": 3, "trigger": trigger, "name": second["name"]}
    ]
    assert [c["call_id"] for c in event_data(events, "tool.call")] == [first["id"], second["id"]]
    assert {"kind": "call_rejected", "step": 3, "reason": "tools_off"} in guards(
        events, "call_rejected"
    )


async def test_a_loop_answered_at_once_completes(run_script: RunScript) -> None:
    run, events = await run_script(
        [
            [call("calculate", expression="2+2")],
            [call("calculate", expression="2+2")],
            say("2 + 2 is 4."),
        ]
    )
    assert (run.status, run.answer) == ("completed", "2 + 2 is 4.")
    assert len(guards(events, "loop_broken")) == 1
    assert not guards(events, "call_rejected")


async def test_a_model_that_keeps_calling_ends_no_answer(run_script: RunScript) -> None:
    again = [[call("calculate", expression="2+2")] for _ in range(4)]
    run, events = await run_script(again)
    assert (run.status, run.stop_reason, run.answer) == ("stopped", "no_answer", None)
    assert len(event_data(events, "tool.result")) == 2
    end = events[-1]
    assert end.kind == "run.end"
    assert end.data["stop_reason"] == "no_answer"
    assert end.data["answer"] is None


@pytest.mark.parametrize(
    "written",
    [
        '```tool\n{"name": "calculate", "args": {"expression": "6*7"}}\n```',
        '{"expression": "6*7"}',
    ],
)
async def test_a_call_written_as_the_last_steps_answer_is_never_the_answer(
    run_script: RunScript, written: str
) -> None:
    turns = [[call("calculate", expression="6*7")], say(written), say("6 times 7 is 42.")]
    run, events = await run_script(turns, max_steps=2)
    assert (run.status, run.answer) == ("completed", "6 times 7 is 42.")
    assert {"kind": "call_rejected", "step": 2, "reason": "tools_off"} in guards(
        events, "call_rejected"
    )


async def test_a_written_call_again_in_the_final_round_ends_no_answer(
    run_script: RunScript,
) -> None:
    written = say('{"name": "calculate", "arguments": {"expression": "6*7"}}')
    run, _ = await run_script(
        [[call("calculate", expression="6*7")], written, written], max_steps=2
    )
    assert (run.status, run.stop_reason, run.answer) == ("stopped", "no_answer", None)


async def start(stack: Supervisor, prompt: str, **options: Any) -> tuple[RunView, list[RunEvent]]:
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(prompt, **options)
        events = [event async for event in client.events(accepted.run_id)]
        return await client.get_run(accepted.run_id), events


def sent(fake_model: FakeUpstream) -> list[list[dict[str, Any]]]:
    """The messages of each request the model server got, in order."""
    return [r.json()["messages"] for r in fake_model.received if r.path.endswith("/completions")]


async def test_the_compact_tier_offers_cards_and_keeps_its_prefix(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    fake_model.received.clear()
    time_call = '```tool\n{"name": "current_time", "args": {"timezone": "Asia/Tokyo"}}\n```'
    fake_model.queue(
        chat_text_stream(time_call, SMALL_MODEL),
        chat_text_stream(time_call, SMALL_MODEL),  # the same call again: a loop
        chat_text_stream("It is evening in Tokyo.", SMALL_MODEL),
    )
    run, events = await start(
        stack, "What time is it in Tokyo?", provider="openai", model=SMALL_MODEL
    )
    assert (run.status, run.answer) == ("completed", "It is evening in Tokyo."), run.stop_reason
    assert guards(events, "loop_broken")[0]["trigger"] == "repeated_call"
    first, second, third = sent(fake_model)
    system = first[0]["content"]
    # Only the clock's card, one line with its example; the short system prompt.
    assert COMPACT_SYSTEM in system
    assert "- current_time(timezone?: string): Returns the current date" in system
    assert 'Example: {"timezone": "Asia/Tokyo"}' in system
    for other in ("convert_time", "calculate", "file_read", "shell", "web_fetch"):
        assert other not in system
    # The prefix: the system prompt (the day's date at its end) byte for byte, then the
    # history as it was; nothing after the history, so the question is read last.
    assert second[0]["content"] == system
    assert second[: len(first)] == first
    assert "Today is" in system.rsplit("\n\n", 1)[-1]
    assert first[-1] == {"role": "user", "content": "What time is it in Tokyo?"}
    assert second[-2]["content"].startswith("Result of current_time")
    assert second[-1] == {"role": "system", "content": after_results("What time is it in Tokyo?")}
    # The loop-breaking round: no tools taught, the answer asked for from the results.
    assert "current_time(" not in third[0]["content"]
    assert "Tools are switched off now" in third[-1]["content"]


async def test_after_an_unusable_call_the_compact_tier_offers_every_tool(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    # The question points at the clock only; the model wants the calculator, which is
    # not on offer, so its call is unusable. The next step offers every tool as a card.
    fake_model.received.clear()
    sums = '```tool\n{"name": "calculate", "args": {"expression": "6*7"}}\n```'
    fake_model.queue(
        chat_text_stream(sums, SMALL_MODEL),
        chat_text_stream(sums, SMALL_MODEL),
        chat_text_stream("It is 42.", SMALL_MODEL),
    )
    run, events = await start(
        stack, "What time is it in Tokyo?", provider="openai", model=SMALL_MODEL
    )
    assert (run.status, run.answer) == ("completed", "It is 42."), run.stop_reason
    first, second, _ = sent(fake_model)
    assert "- calculate(" not in first[0]["content"]
    assert "- calculate(" in second[0]["content"]
    result = event_data(events, "tool.result")[0]
    assert (result["name"], result["ok"]) == ("calculate", True)


def branches(body: dict[str, Any]) -> list[str]:
    """The `tool` values the reply grammar of a request allows."""
    schema = body["response_format"]["schema"]
    return [b["properties"]["tool"]["const"] for b in schema["anyOf"]]


async def test_a_small_models_first_step_must_call_and_then_may_answer(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    """Under its reply grammar a compact-tier model's first step of a request that needs a
    tool can only call one (no answer branch to make a value up in); once the result is
    in, it may answer. Its call comes back in the history as it wrote it, it is asked
    greedily, and the result is the last thing it reads."""
    fake_model.received.clear()
    fake_model.queue(
        chat_text_stream('{"tool": "current_time", "args": {"timezone": "Asia/Tokyo"}}', "m"),
        chat_text_stream('{"tool": "none", "answer": "It is evening in Tokyo."}', "m"),
    )
    run, _ = await start(stack, "What time is it in Tokyo?", provider="openai", model=GRAMMAR_MODEL)
    assert (run.status, run.answer) == ("completed", "It is evening in Tokyo."), run.stop_reason
    first, second = (r.json() for r in fake_model.received if r.path.endswith("/completions"))
    assert branches(first) == ["current_time"]
    assert branches(second) == ["current_time", "none"]
    assert first["temperature"] == second["temperature"] == 0.0
    assert second["messages"][0] == first["messages"][0]
    called, result, note = second["messages"][-3:]
    assert called == {
        "role": "assistant",
        "content": '{"tool": "current_time", "args": {"timezone": "Asia/Tokyo"}}',
    }
    assert result["role"] == "user"
    assert result["content"].startswith("Result of current_time")
    assert note == {"role": "system", "content": after_results("What time is it in Tokyo?")}


async def test_a_request_no_tool_fits_is_free_to_answer(
    stack: Supervisor, fake_model: FakeUpstream
) -> None:
    fake_model.received.clear()
    fake_model.queue(chat_text_stream('{"tool": "none", "answer": "Hello!"}', "m"))
    run, _ = await start(stack, "Say hello.", provider="openai", model=GRAMMAR_MODEL)
    assert (run.status, run.answer) == ("completed", "Hello!"), run.stop_reason
    (only,) = (r.json() for r in fake_model.received if r.path.endswith("/completions"))
    assert branches(only) == ["none"]


async def test_an_edit_refused_as_not_read_makes_the_next_step_read_the_file(
    stack: Supervisor, fake_model: FakeUpstream, workspace: Path
) -> None:
    """A small model told "todo.txt was not read in this run; file_read it first" sent the
    same edit again until its steps ran out. The step after such a failure offers only the
    tool it names, and must call it; the edit then goes through."""
    fake_model.received.clear()
    edit = '{"tool": "file_edit", "args": {"path": "todo.txt", "old_text": "milk", "new_text": "bread"}}'
    fake_model.queue(
        chat_text_stream(edit, "m"),
        chat_text_stream('{"tool": "file_read", "args": {"path": "todo.txt"}}', "m"),
        chat_text_stream(edit, "m"),
        chat_text_stream('{"tool": "none", "answer": "Replaced milk with bread."}', "m"),
    )
    run, _ = await start(
        stack,
        "In todo.txt, replace the word milk with bread.",
        provider="openai",
        model=GRAMMAR_MODEL,
        agent=EDITOR,
    )
    assert (run.status, run.answer) == ("completed", "Replaced milk with bread."), run.steps
    assert (workspace / "todo.txt").read_text() == "eggs\nbread\n"
    bodies = [r.json() for r in fake_model.received if r.path.endswith("/completions")]
    assert branches(bodies[0])[:2] == ["file_read", "file_edit"]
    # After the refusal: the reader alone, and no answer branch (it must be called).
    assert branches(bodies[1]) == ["file_read"]
    assert "FAILED: not_read" in json.dumps(bodies[1]["messages"])
    assert "file_edit" in branches(bodies[2])
