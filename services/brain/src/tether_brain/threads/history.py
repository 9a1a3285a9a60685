"""What a thread's next turn inherits of the last one: its run's messages as the journal
holds them (which already open with the turns before it), cleaned so a provider takes
them: system notes stay behind (skill bodies, compaction notes belong to their turn), and
every tool call is paired with its result (a run stopped or crashed mid-step can leave a
call unanswered or a result without its call). Fitting to the window is the loop's, by
the same rules as any history (`context/fitting.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from tether_common.messages.gateway import ChatMessage

CARRIED_ROLES = frozenset({"user", "assistant", "tool"})


def carried(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """`messages` without system notes, with calls and results paired."""
    kept = [m for m in messages if m.role in CARRIED_ROLES]
    answered = {m.tool_call_id for m in kept if m.role == "tool"}
    out: list[ChatMessage] = []
    called: set[str] = set()
    for message in kept:
        if message.role == "assistant" and message.tool_calls:
            calls = [c for c in message.tool_calls if c.id in answered]
            called.update(c.id for c in calls)
            if calls != message.tool_calls:
                message = message.model_copy(update={"tool_calls": calls})
            if not calls and not message.content:
                continue  # nothing left of it
        elif message.role == "tool" and message.tool_call_id not in called:
            continue  # its call was left out (or never journaled)
        out.append(message)
    return out
