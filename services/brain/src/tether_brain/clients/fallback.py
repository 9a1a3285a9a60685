"""A model turn's fallback chain: which failure of a model is which condition (`error`,
`rate_limit`, `timeout`), the models a turn may ask in order, the one to ask after a
failure, and the error of a turn every model it asked failed.

The gateway reports a provider's failure as an `error` event with a code
(`tether_gateway.providers.http`), after its own retries; the brain decides here whether
the next model is asked. A code with no condition (a bad request, a wrong key, an
unreadable answer) never switches: another model would most likely fail the same way,
or the fault is ours to fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether_common.errors import ErrorCode
from tether_common.messages.agents import FALLBACK_ON, AgentConfig, FallbackOn, ModelChoice
from tether_common.messages.gateway import ErrorEvent

__all__ = ["Attempt", "chain", "condition_of", "failure", "in_force", "next_after"]

CONDITIONS: dict[str, FallbackOn] = {
    ErrorCode.PROVIDER_RATE_LIMITED: "rate_limit",
    ErrorCode.PROVIDER_UNAVAILABLE: "error",  # 5xx, 529, overloaded
    ErrorCode.PROVIDER_UNREACHABLE: "error",  # no connection
    ErrorCode.PROVIDER_DISCONNECTED: "error",  # the stream was cut
    ErrorCode.PROVIDER_ERROR: "error",  # an error the provider's stream named
    ErrorCode.PROVIDER_TIMEOUT: "timeout",  # the provider silent past the gateway's timeout
    ErrorCode.TIMEOUT: "timeout",  # the gateway silent past the brain's (asked twice)
}
MESSAGE_CHARS = 300  # of each attempt's message in a failed turn's error


def condition_of(code: str) -> FallbackOn | None:
    """The condition a failure with `code` meets; None: it never switches models."""
    return CONDITIONS.get(code)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One model a turn asked that failed."""

    provider: str
    model: str | None
    code: str
    message: str

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider


def chain(provider: str, model: str | None, entries: Sequence[ModelChoice]) -> list[ModelChoice]:
    """The models a turn may ask, in order: the run's own first, then each entry naming
    a model not already in the chain (a model that failed is not asked again)."""
    found = [ModelChoice(provider=provider, model=model, when=list(FALLBACK_ON))]
    for entry in entries:
        if all((entry.provider, entry.model) != (c.provider, c.model) for c in found):
            found.append(entry)
    return found


def in_force(pinned: Sequence[ModelChoice], agent: AgentConfig) -> list[ModelChoice]:
    """The run's chain now: the agent's chain in force (so an operator's narrowing, or
    reordering, reaches running runs), kept to the entries the run's starter was allowed
    (`pinned` at its start: a chain changed since never widens what the run may use),
    and within the agent's providers and models as they are now."""
    allowed = {(c.provider, c.model) for c in pinned}
    return [
        entry
        for entry in agent.fallback
        if (entry.provider, entry.model) in allowed
        and (agent.providers is None or entry.provider in agent.providers)
        and (agent.models is None or entry.model in agent.models)
    ]


def next_after(models: Sequence[ModelChoice], position: int, code: str) -> int | None:
    """After the model at `position` failed with `code`: the position of the next entry
    that takes that failure (its `when` names the condition; entries that do not are
    passed over), or None when the failure stands."""
    condition = condition_of(code)
    if condition is None:
        return None
    for later in range(position + 1, len(models)):
        if condition in models[later].when:
            return later
    return None


def failure(attempts: Sequence[Attempt]) -> ErrorEvent:
    """The error of a turn whose every model failed: the last one's code (so a caller
    that reads codes reads it as before), and a message naming each attempt in order."""
    last = attempts[-1]
    named = "; ".join(
        f"{index}. {a.label}: {a.code}: {_short(a.message)}"
        for index, a in enumerate(attempts, start=1)
    )
    return ErrorEvent(
        code=last.code,
        retryable=condition_of(last.code) is not None,
        message=f"{len(attempts)} models failed: {named}",
    )


def _short(message: str) -> str:
    return message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + "…"
