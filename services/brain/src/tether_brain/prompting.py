"""What the model is sent each step: the system prompt and its notes, and the history as
the model should see it (this turn's skills, loaded skill bodies forgotten after their turn)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from tether_brain.prompts import LAST_STEP, system_prompt
from tether_brain.skills import Skill, forget_loaded_skills, skill_index
from tether_brain.state import RunState
from tether_brain.subagents import HELPER_DIRECTIVE
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec

SKILL_NOTE = "skill"  # the `name` of a system message carrying invoked skills


def build_request(
    state: RunState,
    offered: list[OfferedToolSpec],
    last: bool,
    skills: Iterable[Skill],
    hidden_note: str | None = None,
) -> GenerateRequest:
    """The model's view of the run: system prompt (date, live-data rule, helper directive,
    budget, skill index), this turn's history, and the last-step note."""
    system = system_prompt(datetime.now(UTC))
    if state.options.get("helper"):
        system += "\n\n" + HELPER_DIRECTIVE
    if budget := budget_note(state):
        system += "\n\n" + budget
    if hidden_note:
        system += "\n\n" + hidden_note
    if index := skill_index(skills):
        system += "\n\n" + index
    messages = [ChatMessage(role="system", content=system)]
    messages += forget_loaded_skills(this_turns_skills(state.messages))
    if last and state.max_steps > 1:
        messages.append(ChatMessage(role="system", content=LAST_STEP))
    return GenerateRequest(
        run_id=state.run_id,
        provider=state.provider,
        model=state.model,
        messages=messages,
        tools=offered,
        effort="low" if state.counters.low_effort else "normal",
    )


def budget_note(state: RunState) -> str:
    """What is left of the run's budget, shown to the model every step."""
    limits, usage = state.limits, state.usage
    parts = [f"{state.max_steps - state.step} of {state.max_steps} steps"]
    if limits.max_tool_calls is not None:
        parts.append(f"{limits.max_tool_calls - state.counters.tool_calls} tool calls")
    if limits.max_cost is not None:
        parts.append(f"{limits.max_cost - usage.cost:.4f} cost")
    if limits.max_tokens is not None:
        parts.append(f"{limits.max_tokens - usage.input_tokens - usage.output_tokens} tokens")
    return "Budget left: " + ", ".join(parts) + "."


def this_turns_skills(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Skills injected with `/name` last one turn: older injections are left out."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return [
        m
        for i, m in enumerate(messages)
        if not (m.role == "system" and m.name == SKILL_NOTE and i != last_user - 1)
    ]
