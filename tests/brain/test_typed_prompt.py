"""What a typed run's model is told (`context/typed.py`): its system prompt carries the
output schemas, the same text at every step (the cached prefix), for either prompt tier;
an untyped run's carries none; an answer sent back names the violation's path and what
is wrong; and a typed run's JSON answer is never read as a tool call written out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tether_brain.agents.typed import pinned_output
from tether_brain.context.prompting import build_request
from tether_brain.context.typed import fits_typed, repair_note
from tether_brain.loop.finishing import looks_like_call
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_common.messages.agents import AgentConfig
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.profiles import PromptTier
from tether_common.messages.tools import ToolDescriptor
from tether_common.typed_answers import Violation

AGENTS: dict[str, Any] = {"type": "object", "required": ["city"]}
RUNS: dict[str, Any] = {"type": "object", "properties": {"note": {"type": "string"}}}


def state_with(options: RunOptions) -> RunState:
    now = datetime.now(UTC)
    state = RunState(
        run_id="run_typed",
        prompt="which city?",
        provider="local",
        model=None,
        limits=Limits(max_steps=6),
        created_at=now,
        updated_at=now,
        options=options,
    )
    state.messages.append(ChatMessage(role="user", content="which city?"))
    return state


def system_text(state: RunState, tier: PromptTier) -> str:
    request = build_request(state, [], False, [], tier=tier)
    return request.messages[0].content


@pytest.mark.parametrize("tier", ["full", "compact"])
def test_a_typed_runs_system_prompt_carries_each_schema(tier: PromptTier) -> None:
    options = RunOptions(**pinned_output(AgentConfig(output_schema=AGENTS), RUNS))
    assert options.output_schemas == (AGENTS, RUNS)
    assert options.output_repairs == 2
    state = state_with(options)
    first = system_text(state, tier)
    assert "single JSON object" in first
    assert "each of these JSON Schemas" in first
    for schema in (AGENTS, RUNS):
        assert json.dumps(schema, separators=(",", ":")) in first
    state.step = 3
    assert system_text(state, tier) == first  # stable: the prefix a server caches
    untyped = system_text(state_with(RunOptions()), tier)
    assert "JSON Schema" not in untyped


def test_the_same_schema_from_agent_and_run_is_pinned_once() -> None:
    pinned = pinned_output(AgentConfig(output_schema=AGENTS), dict(AGENTS))
    assert pinned["output_schemas"] == (AGENTS,)
    assert pinned_output(AgentConfig(), None) == {}
    assert pinned_output(AgentConfig(output_repairs=0), RUNS)["output_repairs"] == 0


def test_a_repair_note_names_the_violation() -> None:
    note = repair_note(Violation("$.items[0].qty", "'two' is not of type 'integer'"))
    assert "at $.items[0].qty, 'two' is not of type 'integer'" in note
    assert "only the corrected JSON object" in note


def test_a_typed_answer_that_fits_is_not_read_as_a_written_call() -> None:
    tool = ToolDescriptor(
        name="weather",
        description="the weather in a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    answer = '{"city": "Lisbon"}'
    assert looks_like_call(answer, [tool])  # read as the weather tool's bare arguments
    assert fits_typed((AGENTS,), answer)  # so a typed run asks first whether it fits
    assert not fits_typed((AGENTS,), '{"town": "Lisbon"}')
    assert not fits_typed((), answer)  # an untyped run: never
