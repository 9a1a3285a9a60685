"""The context estimate from the run's running total (`fitting.request_estimate`, pure):
the same number as walking the request, whether the history went out as it is, with a
skill note left out or a loaded skill forgotten, and after the run was read back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether_brain.context.fitting import Fitter, estimate, request_estimate
from tether_brain.context.prompting import build_request
from tether_brain.state.run import Limits, RunState
from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
)

TOOLS = [
    OfferedToolSpec(
        name="calculate",
        description="Work out an arithmetic expression.",
        parameters={"type": "object", "properties": {"expression": {"type": "string"}}},
    )
]


def a_run(steps: int) -> RunState:
    now = datetime.now(UTC)
    state = RunState(
        run_id="run_estimate",
        prompt="add them up",
        provider="scripted",
        model=None,
        limits=Limits(max_steps=steps + 1),
        created_at=now,
        updated_at=now,
    )
    state.add_message(ChatMessage(role="user", content=state.prompt))
    for i in range(steps):
        call = CallRecord(id=f"c{i}", name="calculate", arguments={"expression": f"{i} + 1"})
        state.add_message(ChatMessage(role="assistant", content=f"step {i}", tool_calls=[call]))
        state.add_message(
            ChatMessage(role="tool", content=str(i + 1), tool_call_id=f"c{i}", name="calculate")
        )
    return state


def walked(request: GenerateRequest) -> int:
    return estimate(request.messages, request.tools)


@pytest.mark.parametrize("steps", [0, 1, 40])
def test_a_built_request_is_estimated_as_walking_it_would(steps: int) -> None:
    state = a_run(steps)
    request = build_request(state, TOOLS, last=False, skills=[])
    assert request_estimate(request, state) == walked(request)
    last = build_request(state, TOOLS, last=True, skills=[], tier="compact")
    assert request_estimate(last, state) == walked(last)


def test_a_history_sent_changed_is_walked() -> None:
    state = a_run(5)
    system = ChatMessage(role="system", content="rules")
    forgotten = state.messages[2].model_copy(update={"content": "[skill body forgotten]"})
    changed = [system, *state.messages[:2], forgotten, *state.messages[3:]]
    left_out = [system, *state.messages[1:]]
    for messages in (changed, left_out, [system]):
        request = GenerateRequest(run_id="r", provider="p", messages=messages, tools=TOOLS)
        assert request_estimate(request, state) == walked(request)


def test_the_running_total_survives_a_read_back() -> None:
    state = a_run(7)
    again = a_run(0)
    again.messages.clear()
    again.history_chars = 0
    for entry in state.pending:
        if entry.kind == "message":
            again.replay("message", ChatMessage.model_validate_json(entry.text).model_dump())
    assert again.history_chars == state.history_chars > 0
    request = build_request(again, TOOLS, last=False, skills=[])
    assert request_estimate(request, again) == walked(request)
    fitter = Fitter(64, again.prompt)  # far too small a window: over either way
    assert fitter.request_over(request, again) == fitter.over(request.messages, request.tools)
