"""What the model is sent each step: the system prompt and its notes, and the history as
the model should see it (this turn's skills, loaded skill bodies forgotten after their turn).

A request is laid out so its beginning stays the same from step to step and run to run:
the system prompt (stable text only), then the tools (which the gateway or the server's
chat template renders right after it), then the history, and last a note with what
changes (the date, the budget left, the last-step or answer-from-results instruction).
A local server's prompt cache then reuses everything up to the newest messages."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from tether_brain.context.prompts import (
    HELPER_DIRECTIVE,
    LAST_STEP,
    answer_from_results,
    dated_note,
    system_prompt,
)
from tether_brain.skills import LOAD_SKILL, Skill, forget_loaded_skills, skill_index
from tether_brain.state.run import RunState
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec
from tether_common.messages.profiles import PromptTier

SKILL_NOTE = "skill"  # the `name` of a system message carrying invoked skills


def build_request(
    state: RunState,
    offered: list[OfferedToolSpec],
    last: bool,
    skills: Iterable[Skill],
    hidden_note: str | None = None,
    *,
    tier: PromptTier = "full",
    finishing: bool = False,
    now: datetime | None = None,
) -> GenerateRequest:
    """The model's view of the run: the stable system prompt (rules, helper directive,
    hidden services, skill index), this turn's history, and the closing note (date,
    budget, and the last-step or answer-from-results instruction when due)."""
    messages = [
        ChatMessage(role="system", content=stable_system(state, offered, skills, tier, hidden_note))
    ]
    messages += forget_loaded_skills(this_turns_skills(state.messages))
    messages.append(
        ChatMessage(
            role="system",
            content=closing_note(state, tier, now or datetime.now(UTC), last, finishing),
        )
    )
    return GenerateRequest(
        run_id=state.run_id,
        provider=state.provider,
        model=state.model,
        messages=messages,
        tools=offered,
        effort="low" if state.counters.low_effort else "normal",
    )


def stable_system(
    state: RunState,
    offered: list[OfferedToolSpec],
    skills: Iterable[Skill],
    tier: PromptTier,
    hidden_note: str | None,
) -> str:
    """The system prompt: nothing in it changes between steps of a run (nor between runs
    of one agent with the same tools), so it can open the prefix a server caches."""
    parts = [system_prompt(tier)]
    if state.options.helper:
        parts.append(HELPER_DIRECTIVE)
    if hidden_note:
        parts.append(hidden_note)
    # A compact prompt names skills only when `load_skill` is on offer to load them.
    loadable = tier == "full" or any(t.name == LOAD_SKILL for t in offered)
    if loadable and (index := skill_index(skills)):
        parts.append(index)
    return "\n\n".join(parts)


def closing_note(
    state: RunState, tier: PromptTier, now: datetime, last: bool, finishing: bool
) -> str:
    """What changes from step to step, sent after the history."""
    parts = [dated_note(now, tier)]
    if tier == "full":
        parts.append(budget_note(state))
    if last and state.max_steps > 1:
        parts.append(LAST_STEP)
    elif finishing:
        parts.append(answer_from_results(state.prompt))
    return " ".join(parts)


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
