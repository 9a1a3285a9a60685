"""The probe battery: what a model can do, found by asking it, and the profile that follows.

Five checks, each one generation through the provider's own adapter:
`tool_call` (asked the time in Tokyo, it calls `current_time` for Asia/Tokyo),
`no_tool` (asked the capital of France, it answers without a call), `tool_result` (given
a `calculate` result, it answers from it instead of calling again), `argument_fidelity`
(asked for 1234 * 5678, the call's expression carries both numbers exactly) and
`json_validity` (every call it made was readable JSON that needed no repair).

The battery runs once per way of asking: native tool calls, the text protocol, and (for
OpenAI-compatible servers) the text protocol under a grammar. The way with the most
checks passed wins (native on a tie, then plain text: the simpler way); a model that
does not pass all five gets the `compact` prompt tier. Context window and price are kept
from the model's current profile: the battery does not measure them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    OfferedToolSpec,
    ToolCallEvent,
)
from tether_common.messages.profiles import ModelProfile, ProbeCheck, ProbeReport
from tether_gateway.profiles import Profiles
from tether_gateway.providers.base import Provider

log = logging.getLogger(__name__)

SYSTEM = "You are a helpful assistant. Use a tool when it helps; otherwise answer briefly."
PROBE_OUTPUT_TOKENS = 256

_TIME = OfferedToolSpec(
    name="current_time",
    description='The current time in an IANA time zone. Example: {"timezone": "Europe/Paris"}',
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
)
_CALCULATE = OfferedToolSpec(
    name="calculate",
    description='Evaluates an arithmetic expression. Example: {"expression": "2 * (3 + 4)"}',
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)
TOOLS = [_TIME, _CALCULATE]


@dataclass(slots=True)
class Reply:
    """What one probe generation produced."""

    text: str = ""
    calls: list[ToolCallEvent] = field(default_factory=list)
    finish_reason: str = ""
    error: str | None = None
    seconds: float = 0.0


# A provider built to ask one model one way (the probe's stand-in profile).
ProviderFor = Callable[[ModelProfile], Provider]


@dataclass(frozen=True, slots=True)
class Way:
    """One way of asking: the profile fields the battery tries."""

    label: str
    tool_calling: str
    grammar: bool

    def applied(self, profile: ModelProfile) -> ModelProfile:
        return profile.model_copy(
            update={"tool_calling": self.tool_calling, "grammar": self.grammar}
        )


NATIVE = Way("native", "native", False)
TEXT = Way("text", "text", False)
GRAMMAR = Way("text+grammar", "text", True)
CONSTRAINABLE = frozenset({"openai", "local"})


async def probe(
    provider_for: ProviderFor, profiles: Profiles, provider: str, model: str | None
) -> ProbeReport:
    """Run the battery every applicable way and return the best way's profile."""
    current = profiles.get(provider, model)
    ways = [NATIVE, TEXT, GRAMMAR] if provider in CONSTRAINABLE else [NATIVE, TEXT]
    results: list[tuple[Way, list[ProbeCheck]]] = []
    for way in ways:
        checks = await battery(provider_for(way.applied(current)), current)
        log.info("probe %s/%s %s: %s", provider, current.model, way.label, _score(checks))
        results.append((way, checks))
    best_way, best = max(results, key=lambda r: _score(r[1]))  # first on a tie
    found = best_way.applied(current).model_copy(
        update={
            "prompt_tier": "full" if _score(best) == len(best) else "compact",
            "source": "probed",
            "probed_at": datetime.now(UTC),
            "checks": {check.name: check.passed for check in best},
            "notes": "; ".join(f"{w.label}: {_score(c)}/{len(c)}" for w, c in results),
        }
    )
    labelled = [
        c.model_copy(update={"name": f"{w.label}: {c.name}"})
        for w, checks in results
        for c in checks
    ]
    return ProbeReport(profile=found, checks=labelled)


def _score(checks: Sequence[ProbeCheck]) -> int:
    return sum(check.passed for check in checks)


async def battery(provider: Provider, profile: ModelProfile) -> list[ProbeCheck]:
    """The five checks against one provider; a provider error fails the check, no more."""
    tokyo = await ask(provider, profile, [_user("What time is it in Tokyo right now?")])
    paris = await ask(provider, profile, [_user("What is the capital of France? One word.")])
    product = await ask(
        provider, profile, [_user("What is 17 * 23?"), *_called_calculate("17 * 23", "391")]
    )
    digits = await ask(provider, profile, [_user("Calculate 1234 * 5678 with the calculator.")])
    made = [call for reply in (tokyo, digits) for call in reply.calls]
    unusable = any(r.finish_reason == "unusable_call" for r in (tokyo, paris, product, digits))
    return [
        _check("tool_call", tokyo, _calls_tokyo(tokyo)),
        _check("no_tool", paris, not paris.calls and "paris" in paris.text.lower()),
        _check("tool_result", product, not product.calls and "391" in product.text),
        _check("argument_fidelity", digits, _keeps_digits(digits)),
        ProbeCheck(
            name="json_validity",
            passed=bool(made) and not unusable and not any(call.repairs for call in made),
            detail=f"{len(made)} call(s), repaired: "
            + (", ".join(r for call in made for r in call.repairs) or "none"),
        ),
    ]


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def _called_calculate(expression: str, result: str) -> list[ChatMessage]:
    call = CallRecord(id="call_probe", name="calculate", arguments={"expression": expression})
    return [
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content=result, tool_call_id="call_probe", name="calculate"),
    ]


def _calls_tokyo(reply: Reply) -> bool:
    return any(
        call.name == "current_time" and "tokyo" in str(call.arguments.get("timezone", "")).lower()
        for call in reply.calls
    )


def _keeps_digits(reply: Reply) -> bool:
    return any(
        call.name == "calculate"
        and "1234" in (expression := str(call.arguments.get("expression", "")))
        and "5678" in expression
        for call in reply.calls
    )


def _check(name: str, reply: Reply, passed: bool) -> ProbeCheck:
    seen = reply.error or "; ".join(
        [
            *(f"{c.name}({c.arguments})" for c in reply.calls),
            *([reply.text[:120]] * bool(reply.text)),
        ]
    )
    return ProbeCheck(name=name, passed=passed, detail=seen[:300], seconds=reply.seconds)


async def ask(provider: Provider, profile: ModelProfile, history: list[ChatMessage]) -> Reply:
    request = GenerateRequest(
        run_id="probe",
        provider=profile.provider,
        model=profile.model,
        messages=[ChatMessage(role="system", content=SYSTEM), *history],
        tools=TOOLS,
        max_output_tokens=PROBE_OUTPUT_TOKENS,
    )
    reply = Reply()
    started = time.perf_counter()
    async with aclosing(provider.generate(request)) as events:
        async for event in events:
            _take(reply, event)
    reply.seconds = round(time.perf_counter() - started, 2)
    return reply


def _take(reply: Reply, event: Any) -> None:
    match event:
        case ChunkEvent():
            reply.text += event.text
        case ToolCallEvent():
            reply.calls.append(event)
        case DoneEvent():
            reply.finish_reason = event.finish_reason
        case ErrorEvent():
            reply.error = f"{event.code}: {event.message}"


__all__ = ["TOOLS", "battery", "probe"]
