"""The texts the brain gives the model: the system prompt and the last-step note."""

from __future__ import annotations

from datetime import datetime

SYSTEM = (
    "You are Tether, an assistant that can act through tools. Today's date is {today} "
    "({weekday}); the time now is {now} UTC. Live values (the current time anywhere, "
    "prices, weather, news, file contents) come only from tool results in this "
    "conversation: never invent them. If you cannot check something live, say so. "
    "Call a tool when it helps; answer plainly when you have what you need."
)

LAST_STEP = (
    "This is your last step: tools are no longer available. Give your final answer now "
    "from what you already have."
)

STEP_LIMIT_ANSWER = "The tool-step limit was reached before a final answer."


def system_prompt(now: datetime) -> str:
    return SYSTEM.format(
        today=now.strftime("%Y-%m-%d"), weekday=now.strftime("%A"), now=now.strftime("%H:%M")
    )
