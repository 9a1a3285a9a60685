"""The `scripted` model, read in one place: which turn of a script a request replays, its
entries as model events, and each call fitted to the offered tools as the gateway hands
every call on. The gateway's `scripted` provider and the brain's in-process scripted
model (`tether_brain.testing`) both play scripts through here, so the two cannot read
one differently (the contract suite runs the same scripts through both).

A script is `{"turns": [[entry, ...], ...]}` and optionally `"helpers": {"<task>":
{"turns": [...]}}` (the turns a sub-agent started with that task replays: its first user
message is the task). The turn replayed is the number of assistant messages already in
the request, so a player keeps no state. An entry is a model event (`kind`: chunk,
thinking, tool_call, usage, done, error) or `{"pause_s": x}`, a wait before the next
event (to test stops and timeouts), or `{"absent": "text"}`, an assertion on the request:
a request whose messages hold `text` anywhere gets an `error` event (`script_invalid`)
instead of the turn (a test's proof that something never reached the model), or
`{"present": "text"}`, its opposite: a request whose messages do not hold `text` gets
that error (a test's proof of what the model was shown). A turn that does not end itself
ends `done` (`stop`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from pydantic import ValidationError

from tether_common.errors import ErrorCode
from tether_common.messages.gateway import (
    MODEL_EVENT,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ModelEvent,
    OfferedToolSpec,
    ToolCallEvent,
)
from tether_common.toolcalls import fit_call

Script = dict[str, Any]
Sleep = Callable[[float], Awaitable[None]]


def checked(script: object, name: str) -> Script:
    """`script` if it holds a list of turns; else `LookupError` naming it."""
    if not isinstance(script, dict) or not isinstance(script.get("turns"), list):
        raise LookupError(f"script '{name}' has no list of turns")
    return script


async def play(
    script: Script, request: GenerateRequest, *, sleep: Sleep = asyncio.sleep
) -> AsyncGenerator[ModelEvent, None]:
    """The events of the turn `request` asks of `script`; a script that does not fit the
    request (no such turn, a bad entry) ends in an `error` event, never an exception.
    `sleep` waits out a `pause_s` (a fake clock's, in process)."""
    try:
        turns = _turns_for(script, request)
    except (LookupError, ValueError, TypeError, AttributeError) as exc:
        yield ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=str(exc))
        return
    index = sum(1 for m in request.messages if m.role == "assistant")
    if index >= len(turns):
        yield ErrorEvent(
            code=ErrorCode.SCRIPT_EXHAUSTED,
            message=f"script has {len(turns)} turns; turn {index + 1} asked",
        )
        return
    if (seen := _present(turns[index], request)) is not None:
        yield ErrorEvent(
            code=ErrorCode.SCRIPT_INVALID, message=f"the request holds {seen!r}, said absent"
        )
        return
    if (missing := _missing(turns[index], request)) is not None:
        yield ErrorEvent(
            code=ErrorCode.SCRIPT_INVALID,
            message=f"the request lacks {missing!r}, said present",
        )
        return
    async for event in _replay(turns[index], sleep):
        yield event


def _present(entries: list[dict[str, Any]], request: GenerateRequest) -> str | None:
    """The first text an `absent` entry names that the request's messages hold."""
    wanted = [str(e["absent"]) for e in entries if isinstance(e, dict) and "absent" in e]
    if not wanted:
        return None
    said = request.model_dump_json()
    return next((text for text in wanted if text in said), None)


def _missing(entries: list[dict[str, Any]], request: GenerateRequest) -> str | None:
    """The first text a `present` entry names that the request's messages lack."""
    wanted = [str(e["present"]) for e in entries if isinstance(e, dict) and "present" in e]
    if not wanted:
        return None
    said = request.model_dump_json()
    return next((text for text in wanted if text not in said), None)


async def _replay(entries: list[dict[str, Any]], sleep: Sleep) -> AsyncGenerator[ModelEvent, None]:
    for entry in entries:
        if "pause_s" in entry:
            await sleep(float(entry["pause_s"]))
            continue
        if "absent" in entry or "present" in entry:  # checked before the turn
            continue
        try:
            event = MODEL_EVENT.validate_python(entry)
        except ValidationError as exc:
            yield ErrorEvent(code=ErrorCode.SCRIPT_INVALID, message=f"bad script event: {exc}")
            return
        yield event
        if event.kind in ("done", "error"):
            return
    yield DoneEvent(finish_reason="stop")


def _turns_for(script: Script, request: GenerateRequest) -> list[list[dict[str, Any]]]:
    """The main turns, or a helper's when the request's first user message is its task."""
    first_user = next((m.content for m in request.messages if m.role == "user"), None)
    helper = script.get("helpers", {}).get(first_user)
    turns = helper["turns"] if isinstance(helper, dict) else script["turns"]
    if not isinstance(turns, list):
        raise LookupError("a helper script has no list of turns")
    return turns


def fitted(event: ModelEvent, tools: Sequence[OfferedToolSpec]) -> ModelEvent:
    """A call fitted to the offered tools (every provider's, native or parsed from text;
    a parsed call is already fitted and comes through unchanged); any other event as it
    is. What the fitting changed is added to the call's `repairs`."""
    if not isinstance(event, ToolCallEvent) or not tools:
        return event
    call = fit_call(event.name, event.arguments, tools)
    if call is None:
        return event
    added = [r for r in call.repairs if r not in event.repairs]
    if not added and call.name == event.name and _identical(call.args, event.arguments):
        return event  # written as it stands: no copy (the usual case)
    repairs = [*event.repairs, *added]
    return event.model_copy(update={"name": call.name, "arguments": call.args, "repairs": repairs})


def _identical(a: object, b: object) -> bool:
    """Equal as JSON values, types included (`1`, `1.0` and `True` are ==, but a fitted
    call that turned one into another must be copied)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_identical(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_identical, a, b))
    if isinstance(a, float) and isinstance(b, float):
        return repr(a) == repr(b)  # -0.0 is not 0.0 on the wire
    return a == b


__all__ = ["Script", "Sleep", "checked", "fitted", "play"]
