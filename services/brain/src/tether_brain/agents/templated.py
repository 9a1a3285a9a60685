"""An agent's instructions and prefetch calls as one run gets them: their template
variables (`tether_common.templating`) filled once, when the run starts, with its start
time, caller, agent and tenant. The result is pinned on the run (`RunOptions`), so the
prompt does not change from step to step (a server's prompt cache keeps hitting) and a
step replayed after a takeover sees the same text."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tether_common.messages.agents import AgentConfig
from tether_common.messages.gateway import CallRecord
from tether_common.templating import render, render_arguments, run_values

PREFETCH_ID = "prefetch_{index}"  # a prefetch call's id: its idempotency key is `run:id`


def templated(
    config: AgentConfig, *, started: datetime, caller: str | None, agent: str, tenant: str
) -> dict[str, Any]:
    """The run options holding `config`'s instructions and prefetch calls, filled."""
    values = run_values(started, caller=caller, agent=agent, tenant=tenant)
    filled: dict[str, Any] = {}
    if config.instructions and config.instructions.strip():
        filled["instructions"] = render(config.instructions, values).strip()
    if config.prefetch:
        filled["prefetch"] = tuple(
            CallRecord(
                id=PREFETCH_ID.format(index=index),
                name=call.tool,
                arguments=render_arguments(call.arguments, values),
            )
            for index, call in enumerate(config.prefetch)
        )
    return filled
