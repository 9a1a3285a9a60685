"""A thread's parts without the services: what a turn carries of the last, the budget's
remainder, and fitting a history that opens with earlier turns."""

from __future__ import annotations

import pytest

from tether_brain.context.fitting import Fitter
from tether_brain.threads.history import carried
from tether_brain.threads.manager import remaining
from tether_brain.threads.store import Spent
from tether_common.errors import ConflictError
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.threads import ThreadBudgets


def calls(*ids: str) -> list[CallRecord]:
    return [CallRecord(id=i, name="current_time", arguments={}) for i in ids]


def test_a_turn_carries_paired_calls_and_no_system_notes() -> None:
    last = [
        ChatMessage(role="system", content="a skill's body"),
        ChatMessage(role="user", content="time?"),
        ChatMessage(role="assistant", tool_calls=calls("a", "lost")),
        ChatMessage(role="tool", tool_call_id="a", content="12:00"),
        ChatMessage(role="tool", tool_call_id="stray", content="no call"),
        ChatMessage(role="assistant", tool_calls=calls("unanswered")),
        ChatMessage(role="assistant", content="noon"),
    ]
    kept = carried(last)
    assert [(m.role, m.content, [c.id for c in m.tool_calls]) for m in kept] == [
        ("user", "time?", []),
        ("assistant", "", ["a"]),
        ("tool", "12:00", []),
        ("assistant", "noon", []),
    ]
    assert carried(kept) == kept  # carried again by the next turn: unchanged


def test_the_next_run_gets_what_the_thread_has_left() -> None:
    budgets = ThreadBudgets(max_steps=10, max_tool_calls=4, max_tokens=1000, max_seconds=30)
    left = remaining(budgets, Spent(steps=7, tool_calls=5, tokens=400, cost=1.0))
    assert left == {"max_steps": 3, "max_tool_calls": 0, "max_tokens": 600, "max_seconds": 30}
    assert remaining(ThreadBudgets(), Spent(steps=99)) == {"max_seconds": None}
    for budgets, spent in (
        (ThreadBudgets(max_steps=3), Spent(steps=3)),
        (ThreadBudgets(max_tokens=10), Spent(tokens=12)),
        (ThreadBudgets(max_cost=1.0), Spent(cost=1.0)),
    ):
        with pytest.raises(ConflictError) as refused:
            remaining(budgets, spent)
        assert refused.value.code == "thread_budget_spent"


def test_fitting_drops_earlier_turns_first_and_keeps_the_prompt() -> None:
    earlier = []
    for k in range(6):
        earlier += [
            ChatMessage(role="user", content=f"question {k} " + "x" * 400),
            ChatMessage(role="assistant", content=f"answer {k} " + "y" * 400),
        ]
    prompt = "the question now"
    messages = [
        ChatMessage(role="system", content="rules"),
        *earlier,
        ChatMessage(role="user", content=prompt),
        ChatMessage(role="system", content="closing note"),
    ]
    fitted = Fitter(window=700, prompt=prompt).fit(messages, [])
    contents = [m.content for m in fitted.messages]
    assert prompt in contents
    assert fitted.dropped, fitted.actions
    assert fitted.dropped[0].content.startswith("question 0")  # the oldest turn went first
    assert contents[0] == "rules"
    assert contents.index(prompt) > max(
        (i for i, c in enumerate(contents) if c.startswith(("question", "answer"))), default=0
    )
