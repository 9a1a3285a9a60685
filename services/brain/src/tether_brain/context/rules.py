"""The loop's text rules: when an answer is not yet an answer.

Each rule is a plain function of the turn and the run, so the loop stays a loop and the
rules can be read (and tested) on their own."""

from __future__ import annotations

import re

from tether_brain.state.control import STOP_REQUESTED
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common.messages.events import Guard

LIVE_QUESTION = re.compile(
    r"\b(now|today|tonight|currently|current|latest|right now|at the moment|this (week|month|year)|"
    r"what time|what's the time|weather|price of|stock|news)\b",
    re.IGNORECASE,
)
CANNOT_CHECK = re.compile(
    r"(can(no|')t|cannot|unable to|not able to|no way to|don't have (access|a way)|"
    r"do not have (access|a way)|can't access|without (access|a tool)|not possible to) "
    r"(check|verify|access|look up|browse|know|get|fetch|see|confirm|provide)",
    re.IGNORECASE,
)
PROMISE = re.compile(
    r"\b(I'll|I will|let me|I am going to|I'm going to)\s+(now\s+)?"
    r"(run|check|look|search|fetch|read|open|call|use|execute|list|find)\b",
    re.IGNORECASE,
)
RETRIEVAL_TOOLS = frozenset(
    {"web_search", "web_fetch", "file_read", "file_search", "retrieve_output"}
)

NUDGE_FINAL = "You reasoned but gave no answer. Give your final answer now."
REMIND_LIVE = (
    "Your answer states something about the present without a tool result to back it. "
    "Check it with a tool, or say plainly that you cannot check live data."
)
COERCE_RETRIEVAL = (
    "This is a research task: before answering, retrieve evidence with a tool "
    "(search, fetch or read) and base the answer on it."
)
PROMISE_WITHOUT_CALL = (
    "You said you would act but called no tool. Call the tool now, or give your answer."
)


def corrective(valid: list[str]) -> str:
    return (
        "Your last message tried to call a tool but no usable call came out. Valid tools: "
        + ", ".join(valid)
        + '. Call one with a ```tool block holding {"name": ..., "args": {...}}, '
        "or answer in plain text."
    )


def needs_live_reminder(prompt: str, answer: str, had_tool_result: bool) -> bool:
    return (
        bool(LIVE_QUESTION.search(prompt))
        and not had_tool_result
        and not CANNOT_CHECK.search(answer)
    )


def promises_action(answer: str) -> bool:
    return bool(PROMISE.search(answer)) and len(answer) < 400


def second_look(state: RunState, thinking: str, answer: str) -> str | None:
    """One extra step where the answer is not yet an answer (each rule fires once)."""
    counters = c = state.counters
    had_result = any(
        m.role == "tool" and not m.content.startswith("FAILED") for m in state.messages
    )
    if state.step >= state.max_steps:
        return None
    if not answer and thinking and counters.nudges == 0:
        c.nudges += 1
        emit(state, Guard(step=state.step, kind="no_answer"))
        return NUDGE_FINAL
    if state.options.research and counters.coercions == 0 and not retrieved(state):
        c.coercions += 1
        emit(state, Guard(step=state.step, kind="no_retrieval"))
        return COERCE_RETRIEVAL
    if counters.reminders == 0 and needs_live_reminder(state.prompt, answer, had_result):
        c.reminders += 1
        emit(state, Guard(step=state.step, kind="live_data"))
        return REMIND_LIVE
    if counters.nudges == 0 and promises_action(answer) and not state.options.guide_only:
        c.nudges += 1
        emit(state, Guard(step=state.step, kind="promised_action"))
        return PROMISE_WITHOUT_CALL
    return None


def retrieved(state: RunState) -> bool:
    return any(
        m.role == "tool" and m.name in RETRIEVAL_TOOLS and not m.content.startswith("FAILED")
        for m in state.messages
    )


def boundary_stop(state: RunState, stop: str | None) -> str | None:
    """The stop reason due before the next step, if any (each limit before what it bounds):
    `stop`, the reason this run was told to stop with (a stop, a kill switch), first."""
    limits, usage = state.limits, state.usage
    reason = None
    if stop is not None:
        return stop
    if state.stop_requested:
        return STOP_REQUESTED
    if limits.max_seconds is not None and state.active_seconds >= limits.max_seconds:
        reason = "max_seconds"
    elif (limits.max_cost is not None and usage.cost >= limits.max_cost) or (
        limits.max_tokens is not None
        and usage.input_tokens + usage.output_tokens >= limits.max_tokens
    ):
        reason = "budget_exhausted"
    elif state.step >= state.max_steps:
        reason = "max_steps"
    if reason is not None:
        emit(
            state,
            Guard(step=state.step, kind=reason if reason != "max_steps" else "step_ceiling"),
        )
    return reason
