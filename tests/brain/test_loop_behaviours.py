"""The loop through the real services, for what only they show: a tool run by the
tools-runner over the bus, a provider's error from the gateway, a stop that cuts a model
stream, a message queued over the API. Every rule of the loop itself runs in process in
test_loop_rules.py (tether_brain.testing), in milliseconds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import RunScript, Turn, call, say, write_script
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
