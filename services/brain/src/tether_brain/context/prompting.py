"""What the model is sent each step: the system prompt and its notes, and the history as
the model should see it (this turn's skills, loaded skill bodies forgotten after their turn).

A request is laid out so its beginning stays the same from step to step and run to run:
the system prompt (stable text only), then the tools (which the gateway or the server's
chat template renders right after it), then the history, and last a note with what
changes (the date, the budget left, the last-step or answer-from-results instruction).
A local server's prompt cache then reuses everything up to the newest messages.

The compact tier (small models) keeps the date, which changes once a day, at the end of
the system prompt instead, and closes a request with a note only when it has an
instruction (the last step, answering from the results, and after results a line saying
to answer from them unless they fall short): a small model reads the last thing it is
given as the thing to answer, and answered "What port is set?" with the date of a
closing note, and shown a result after its call, made the same call again."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from itertools import islice

from tether_brain.context.prompts import (
    HELPER_DIRECTIVE,
    LAST_STEP,
    after_results,
    answer_from_results,
    dated_note,
    system_prompt,
)
from tether_brain.context.typed import output_instruction
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
    must_call: bool = False,
) -> GenerateRequest:
    """The model's view of the run: the stable system prompt (rules, the agent's
    instructions, helper directive,
    hidden services, skill index), this turn's history, and the closing note (date,
    budget, and the last-step or answer-from-results instruction when due)."""
    now = now or datetime.now(UTC)
    system = stable_system(state, offered, skills, tier, hidden_note)
    if tier == "compact":
        system = f"{system}\n\n{dated_note(now, tier)}"
    messages = [ChatMessage(role="system", content=system)]
    messages += history_shown(state)
    if note := closing_note(state, tier, now, last, finishing):
        messages.append(ChatMessage(role="system", content=note))
    return GenerateRequest(
        run_id=state.run_id,
        provider=state.provider,
        model=state.model,
        messages=messages,
        tools=offered,
        effort="low" if state.counters.low_effort else "normal",
        tool_choice="required" if must_call or call_first(state, offered, tier) else "auto",
    )


def call_first(state: RunState, offered: list[OfferedToolSpec], tier: PromptTier) -> bool:
    """Whether this step must be a call: the compact tier's first step of a request that
    its words tie to tools (the compact offer is only what the request plausibly needs, so
    any tool on offer means one is). A small model left free there answers with a value
    it made up ("the port is 8080") as often as it calls. Not after an unusable call (the
    offer is then every tool, not the request's) nor once a result is in."""
    if tier != "compact" or not offered or state.counters.corrections:
        return False
    after = islice(state.messages, state.last_user_at + 1, None)
    return not any(m.role == "tool" for m in after)


def history_shown(state: RunState) -> list[ChatMessage]:
    """The run's history as a request shows it: `forget_loaded_skills(this_turns_skills(
    state.messages))`, walked only when it holds a skill note or a loaded skill that
    either would change (the run keeps where those are), so a long run's step does not
    walk its whole history for them."""
    history, last_user = state.messages, state.last_user_at
    notes = state.named_at.get(SKILL_NOTE, ())
    loads = state.named_at.get(LOAD_SKILL, ())
    if any(history[i].role == "system" and i != last_user - 1 for i in notes) or any(
        history[i].role == "tool" and i < last_user for i in loads
    ):
        return forget_loaded_skills(this_turns_skills(history))
    return history


def stable_system(
    state: RunState,
    offered: list[OfferedToolSpec],
    skills: Iterable[Skill],
    tier: PromptTier,
    hidden_note: str | None,
) -> str:
    """The system prompt: nothing in it changes between steps of a run (nor between runs
    of one agent with the same tools, unless its instructions use the time or the
    caller), so it can open the prefix a server caches. The agent's instructions follow
    the system prompt: text for the model, which no gate reads."""
    parts = [system_prompt(tier)]
    if state.options.instructions:  # the agent's own, filled at the run's start
        parts.append(state.options.instructions)
    if state.options.helper:
        parts.append(HELPER_DIRECTIVE)
    if hidden_note:
        parts.append(hidden_note)
    # A compact prompt names skills only when `load_skill` is on offer to load them.
    loadable = tier == "full" or any(t.name == LOAD_SKILL for t in offered)
    if loadable and (index := skill_index(skills)):
        parts.append(index)
    if state.options.output_schemas:  # a typed run: the form its final answer takes
        parts.append(output_instruction(state.options.output_schemas))
    return "\n\n".join(parts)


def closing_note(
    state: RunState, tier: PromptTier, now: datetime, last: bool, finishing: bool
) -> str:
    """What changes from step to step, sent after the history ("" for none: the compact
    tier's date is in its system prompt)."""
    parts = [dated_note(now, tier), budget_note(state)] if tier == "full" else []
    if last and state.max_steps > 1:
        parts.append(LAST_STEP)
    elif finishing:
        parts.append(answer_from_results(state.prompt))
    elif tier == "compact" and state.messages and state.messages[-1].role == "tool":
        parts.append(after_results(state.prompt))
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
