"""`rules`: Tether's offline default — a deterministic planner, not a language model.

It maps a plain request for the time somewhere onto a `current_time` call and answers
from the tool result; anything else gets an answer naming the settings that turn on a
real model. Every answer says what it is, so nobody mistakes it for a model.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncGenerator

from tether_common.messages.gateway import (
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.places import find_zone
from tether_gateway.providers.base import estimate_tokens

LABEL = "[rules planner — deterministic, not a language model]"

HELP = (
    f"{LABEL} I can answer questions like 'what time is it in Tokyo?' without a model. "
    "For anything else, start Tether with a real model: TETHER_PROVIDER=local (the bundled "
    "SmolLM2 model), or TETHER_PROVIDER=openai with TETHER_GATEWAY_OPENAI_API_KEY "
    "(and TETHER_GATEWAY_OPENAI_BASE_URL for vLLM, llama.cpp, LM Studio or LiteLLM), "
    "TETHER_PROVIDER=anthropic with TETHER_GATEWAY_ANTHROPIC_API_KEY, or "
    "TETHER_PROVIDER=ollama with TETHER_GATEWAY_OLLAMA_URL."
)

TIME_WORDS = re.compile(r"\b(time|clock|o'clock|hour|date|day is it|today)\b", re.IGNORECASE)


def _turn_state(messages: list[ChatMessage]) -> tuple[str, list[ChatMessage]]:
    """The latest user request and the tool results that answered it since."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    prompt = messages[last_user].content if last_user >= 0 else ""
    results = [m for m in messages[last_user + 1 :] if m.role == "tool"]
    return prompt, results


def plan(request: GenerateRequest) -> ChunkEvent | ToolCallEvent:
    prompt, results = _turn_state(request.messages)
    if results:
        latest = results[-1].content
        if latest.startswith("FAILED"):
            return ChunkEvent(text=f"{LABEL} The tool could not answer: {latest}")
        return ChunkEvent(text=f"{LABEL} According to {results[-1].name or 'the tool'}: {latest}")
    offered = {t.name for t in request.tools}
    if TIME_WORDS.search(prompt):
        zone = find_zone(prompt) or "UTC"
        if "current_time" in offered:
            return ToolCallEvent(
                id=f"call_{uuid.uuid4().hex[:12]}",
                name="current_time",
                arguments={"timezone": zone},
            )
        return ChunkEvent(
            text=f"{LABEL} I cannot check the time right now: no clock tool is on offer."
        )
    return ChunkEvent(text=HELP)


class RulesPlanner:
    name = "rules"

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        event = plan(request)
        yield event
        output = len(event.text) if isinstance(event, ChunkEvent) else 20
        yield UsageEvent(
            input_tokens=estimate_tokens(request.messages),
            output_tokens=int(output / 3.5) + 1,
            estimated=True,
        )
        yield DoneEvent(finish_reason="tool_calls" if isinstance(event, ToolCallEvent) else "stop")
