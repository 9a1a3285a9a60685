"""The scripted model's contract: the same scripts and requests played in process
(`tether_brain.testing.ScriptedModel`) and through the real gateway (its `scripted`
provider, asked over the bus by `clients.model.ModelClient`), turn for turn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tether_brain.clients.model import ModelClient, ModelTurn
from tether_brain.testing import ScriptedModel
from tether_common.bus import Bus
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec
from tether_common.testing import Turn, call, say, write_script

Play = Callable[..., Awaitable[ModelTurn]]
TIME = OfferedToolSpec(
    name="current_time",
    description="the time",
    parameters={"type": "object", "properties": {"timezone": {"type": "string"}}},
)


def asking(
    model: str, *, answered: int = 0, task: str = "do it", tools: bool = True
) -> GenerateRequest:
    history = [ChatMessage(role="user", content=task)]
    history += [ChatMessage(role="assistant", content=f"turn {i}") for i in range(answered)]
    return GenerateRequest(
        run_id="run_contract",
        provider="scripted",
        model=model,
        messages=history,
        tools=[TIME] if tools else [],
    )


# The gateway's side asks for the stack only when it runs, so it is marked here.
@pytest.fixture(params=["in_process", pytest.param("gateway", marks=pytest.mark.stack)])
def play(request: pytest.FixtureRequest, scripts_dir: Path) -> Play:
    """Play `turns` (and helpers) for one request, in process or through the gateway."""
    if request.param == "in_process":
        model = ScriptedModel()

        async def in_process(turns: list[Turn], helpers: Any = None, **asked: Any) -> ModelTurn:
            return await model.generate(asking(model.add(turns, helpers), **asked))

        return in_process
    bus: Bus = request.getfixturevalue("stack_bus")
    client = ModelClient(bus, timeout_s=10.0)

    async def gateway(turns: list[Turn], helpers: Any = None, **asked: Any) -> ModelTurn:
        name = write_script(scripts_dir, turns, helpers)
        return await client.generate(asking(name, **asked))

    return gateway


async def test_an_answer(play: Play) -> None:
    turn = await play([say("hello there")])
    assert (turn.text, turn.finish_reason, turn.error, turn.calls) == (
        "hello there",
        "stop",
        None,
        [],
    )


async def test_the_turn_is_the_number_of_answers_so_far(play: Play) -> None:
    turn = await play([say("one"), say("two"), say("three")], answered=2)
    assert turn.text == "three"


async def test_a_call_usage_and_reasoning(play: Play) -> None:
    usage = {"kind": "usage", "input_tokens": 7, "output_tokens": 3, "cost": 0.5}
    first = call("current_time", timezone="UTC")
    turn = await play([[{"kind": "thinking", "text": "hm"}, usage, first]])
    assert [(c.id, c.name, c.arguments) for c in turn.calls] == [
        (first["id"], "current_time", {"timezone": "UTC"})
    ]
    assert (turn.usage.input_tokens, turn.usage.output_tokens, turn.usage.cost) == (7, 3, 0.5)
    assert (turn.thinking, turn.finish_reason) == ("hm", "stop")


async def test_text_after_a_call_is_dropped(play: Play) -> None:
    turn = await play(
        [[{"kind": "chunk", "text": "before "}, call("current_time"), say("after")[0]]]
    )
    assert turn.text == "before "


async def test_a_call_is_fitted_to_the_offered_tools(play: Play) -> None:
    turn = await play([[call("time", timezone="UTC")]])
    assert [c.name for c in turn.calls] == ["current_time"]
    assert turn.calls[0].repairs


async def test_a_helper_plays_its_own_turns(play: Play) -> None:
    turn = await play([say("main")], helpers={"sub task": [say("helper")]}, task="sub task")
    assert turn.text == "helper"


@pytest.mark.parametrize(
    ("turns", "answered", "code"),
    [
        ([say("only")], 1, "script_exhausted"),
        ([[{"kind": "nonsense"}]], 0, "script_invalid"),
        ([[{"kind": "error", "code": "provider_auth", "message": "bad key"}]], 0, "provider_auth"),
    ],
)
async def test_errors(play: Play, turns: list[Turn], answered: int, code: str) -> None:
    turn = await play(turns, answered=answered)
    assert turn.error is not None
    assert turn.error.code == code
