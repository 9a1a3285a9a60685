"""`rules`: Tether's offline default — a deterministic planner, not a language model.

It reads a request (`rules_asks`) and calls the built-in tool that answers it: a sum
("what is 17*23?") with `calculate`, the time somewhere ("what time is it in Tokyo?",
several places at once) with `current_time`, a clock time from one place to others ("9am
in London in Tokyo?") with `convert_time`, a file of the workspace ("show me notes.txt")
with `file_read`, a folder ("list the files in src") with `file_list`, words ("which
files mention whale?") with `file_search`; a follow-up ("and in Paris?", "and times 3?")
is read with the conversation's earlier requests. Once the tools have answered, it
answers from their results. Anything else gets a plain answer saying what it can and
cannot do, and which settings turn on a real model. Every answer says what it is, so
nobody mistakes it for a model.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from typing import Any, assert_never

from tether_common.messages.gateway import (
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    GenerateRequest,
    ModelEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_gateway.providers.base import estimate_tokens
from tether_gateway.providers.rules_asks import (
    Ask,
    Convert,
    ListFiles,
    ReadFile,
    SearchFiles,
    Sum,
    TimeIn,
    Unclear,
    read_in_conversation,
)

LABEL = "[rules planner — deterministic, not a language model]"

CAN = (
    "I can work out arithmetic ('what is 17*23?'), tell the time somewhere ('what time is "
    "it in Tokyo?', then 'and in Paris?'), convert a time between places ('what is 9am "
    "in London in Tokyo?'), and read the workspace ('show me notes.txt', 'list the files "
    "in src', 'which files mention whale?')."
)
REAL_MODEL = (
    "For anything else, start Tether with a real model: TETHER_PROVIDER=local (the bundled "
    "SmolLM2 model), or TETHER_PROVIDER=openai with TETHER_GATEWAY_OPENAI_API_KEY "
    "(and TETHER_GATEWAY_OPENAI_BASE_URL for vLLM, llama.cpp, LM Studio or LiteLLM), "
    "TETHER_PROVIDER=anthropic with TETHER_GATEWAY_ANTHROPIC_API_KEY, or "
    "TETHER_PROVIDER=ollama with TETHER_GATEWAY_OLLAMA_URL."
)
HELP = (
    f"{LABEL} I cannot answer that: I follow fixed rules and understand no more. {CAN} {REAL_MODEL}"
)

Plan = ChunkEvent | list[ToolCallEvent]


def _turn_state(messages: list[ChatMessage]) -> tuple[str, list[str], list[ChatMessage]]:
    """The latest user request, the earlier ones (oldest first), and the messages since."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        return "", [], []
    last = users[-1]
    earlier = [messages[i].content for i in users[:-1]]
    return messages[last].content, earlier, messages[last + 1 :]


def plan(request: GenerateRequest) -> Plan:
    prompt, earlier, since = _turn_state(request.messages)
    if any(m.role == "tool" for m in since):
        return ChunkEvent(text=answer(since))
    ask = read_in_conversation(prompt, earlier)
    if ask is None:
        return ChunkEvent(text=HELP)
    offered = {t.name for t in request.tools}
    calls = tool_calls(ask)
    if isinstance(calls, str):
        return ChunkEvent(text=f"{LABEL} I cannot answer that yet: {calls}. {CAN}")
    missing = sorted({name for name, _ in calls} - offered)
    if missing:
        return ChunkEvent(
            text=f"{LABEL} I would answer that with {', '.join(missing)}, but this agent is "
            "not offered it, and I do not guess."
        )
    return [_call(name, arguments) for name, arguments in calls]


def tool_calls(ask: Ask) -> list[tuple[str, dict[str, Any]]] | str:
    """The calls that answer `ask`, or why there are none."""
    match ask:
        case Sum(expression):
            return [("calculate", {"expression": expression})]
        case TimeIn(zones):
            return [("current_time", {"timezone": zone}) for zone in zones]
        case Convert(time, from_zone, to_zones):
            return [
                ("convert_time", {"time": time, "from_timezone": from_zone, "to_timezone": to})
                for to in to_zones
            ]
        case ReadFile(path):
            return [("file_read", {"path": path})]
        case ListFiles(path):
            return [("file_list", {"path": path})]
        case SearchFiles(pattern):
            return [("file_search", {"pattern": pattern})]
        case Unclear(why):
            return why
        case _:
            assert_never(ask)


def _call(name: str, arguments: dict[str, Any]) -> ToolCallEvent:
    return ToolCallEvent(id=f"call_{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)


def answer(since: list[ChatMessage]) -> str:
    """The answer from the tools' results, one line each."""
    calls = {c.id: c for m in since if m.role == "assistant" for c in m.tool_calls}
    lines = []
    for result in (m for m in since if m.role == "tool"):
        call = calls.get(result.tool_call_id or "")
        name = result.name or (call.name if call is not None else "the tool")
        if result.content.startswith("FAILED"):
            lines.append(f"{name} could not answer: {result.content}")
        elif name == "calculate":  # its result says the sum: "17*23 = 391"
            lines.append(result.content)
        else:
            lines.append(f"According to {name}: {result.content}")
    return f"{LABEL} " + "\n".join(lines)


class RulesPlanner:
    name = "rules"

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        planned = plan(request)
        events: list[ChunkEvent | ToolCallEvent] = (
            [planned] if isinstance(planned, ChunkEvent) else list(planned)
        )
        for event in events:
            yield event
        written = sum(len(e.text) if isinstance(e, ChunkEvent) else 20 for e in events)
        yield UsageEvent(
            input_tokens=estimate_tokens(request.messages),
            output_tokens=int(written / 3.5) + 1,
            estimated=True,
        )
        calls = isinstance(planned, list)
        yield DoneEvent(finish_reason="tool_calls" if calls else "stop")
