"""The texts the brain gives the model, per prompt tier: the system prompt, the dated note
that ends each request, the last-step note, the answer-from-results note and the compact
tier's note after results.

The system prompt holds nothing that changes between steps or runs (no date, no budget,
no run id): it and the tool cards after it are the prefix a local server's prompt cache
reuses, so everything that changes goes into the note at the end of the request."""

from __future__ import annotations

from datetime import datetime

from tether_common.messages.profiles import PromptTier

SYSTEM = (
    "You are Tether, an assistant that can act through tools. Live values (the current "
    "time anywhere, prices, weather, news, file contents) come only from tool results in "
    "this conversation: never invent them. If you cannot check something live, say so. "
    "Call a tool when it helps; answer plainly when you have what you need."
)

# For small models: what to do, in the fewest words; no rule a small model cannot use.
COMPACT_SYSTEM = (
    "You are a helpful assistant. For the time, dates, sums, files, commands or web pages, "
    "call a tool and answer from its result; never make such values up. Otherwise answer "
    "directly. Keep answers short."
)

NOW = "Today's date is {today} ({weekday}); the time now is {now} UTC."
# The date alone: the same all day, so the note does not change from step to step.
COMPACT_NOW = "Today is {today} ({weekday})."

LAST_STEP = (
    "This is your last step: tools are no longer available. Give your final answer now "
    "from what you already have."
)

# The compact tier's note after a step whose calls brought results: a small model shown
# a result next to its own call tends to make the same call again rather than answer.
# The question is repeated: shown a file's contents under its name, a small model
# answered "What port is set in config.ini?" with "config.ini" (the first thing it saw).
AFTER_RESULTS = (
    "The question: {question} If the result above answers it, answer it now from the "
    "result, in a short sentence; call a tool only for what the result does not give."
)

ANSWER_FROM_RESULTS = (
    "Tools are switched off now. Answer the user's question from the tool results above, "
    "in plain text, without calling a tool. The question: {question}"
)
QUESTION_CHARS = 600  # of the user's question, repeated in the note

# What a sub-agent is told it is (its system prompt's last part).
HELPER_DIRECTIVE = (
    "You are a helper agent started by another agent for one task. Do only that task, "
    "with the tools you have, and finish with a short summary of what you found or did; "
    "the other agent sees only that summary."
)
STEP_LIMIT_ANSWER = "The tool-step limit was reached before a final answer."


def system_prompt(tier: PromptTier) -> str:
    return COMPACT_SYSTEM if tier == "compact" else SYSTEM


def dated_note(now: datetime, tier: PromptTier) -> str:
    template = COMPACT_NOW if tier == "compact" else NOW
    return template.format(
        today=now.strftime("%Y-%m-%d"), weekday=now.strftime("%A"), now=now.strftime("%H:%M")
    )


def answer_from_results(question: str) -> str:
    """The note of a tools-off round: answer from what the tools returned."""
    return ANSWER_FROM_RESULTS.format(question=quoted(question))


def after_results(question: str) -> str:
    """The compact tier's note after results: the question again, answered from them."""
    return AFTER_RESULTS.format(question=quoted(question))


def quoted(question: str) -> str:
    """The user's question on one line, cut to QUESTION_CHARS."""
    shown = " ".join(question.split())
    return shown[:QUESTION_CHARS] + "…" if len(shown) > QUESTION_CHARS else shown
