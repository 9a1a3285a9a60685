"""Finish, don't loop: when a run should stop calling tools and answer from what it has,
and when a model's text is a tool call rather than an answer.

A loop is read from the history alone (so a replica taking the run over sees the same):
the last step's calls, compared with every call and result before them. Three triggers:
- `repeated_call`: the same call (name and arguments) made again;
- `result_fed_back`: an argument that is an earlier result (made only of the words of a
  short, value-like result, a number among them: `calculate` on a sum's result,
  `convert_time` on the time just read);
- `repeated_failure`: a call failing with the same error as that tool's failure before.
After any of them the next step offers no tools and asks for the answer from the results."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tether_brain.state.run import call_key
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.toolcalls import OfferedTool, parse_tool_calls

LoopKind = Literal["repeated_call", "result_fed_back", "repeated_failure"]

# A result longer than this is a document (a page, a listing), not a value: following
# words from it into the next call is how such results are meant to be used.
VALUE_RESULT_CHARS = 400
# Arguments that name what a result listed (a path, a ref, a URL): following one of them
# is a normal next step, never a loop.
REFERENCE_KEYS = frozenset({"path", "paths", "ref", "url", "name", "glob"})
_WORDS = re.compile(r"\w+")
_FAILURE = re.compile(r"FAILED:\s*([\w.-]+)")
_FENCE = re.compile(r"^```[\w-]*\s*|\s*```$")


@dataclass(frozen=True, slots=True)
class ToolLoop:
    """Why the next step answers instead of calling: the trigger and the call behind it."""

    kind: LoopKind
    tool: str


def loop_in(messages: Sequence[ChatMessage]) -> ToolLoop | None:
    """The loop the last step's calls made, if any. Only when the history ends with that
    step's results: an answer or a user message since then starts afresh."""
    last = _last_calls_at(messages)
    if last is None:
        return None
    earlier, batch = messages[:last], messages[last]
    results = {m.tool_call_id: m.content for m in messages[last + 1 :] if m.role == "tool"}
    before = [c for m in earlier for c in m.tool_calls]
    seen = {call_key(c.name, c.arguments) for c in before}
    values = _values(before, earlier)
    failures = _failures(before, earlier)
    for call in batch.tool_calls:
        if call_key(call.name, call.arguments) in seen:
            return ToolLoop("repeated_call", call.name)
        if any(_echoes(arg, *value) for arg in _argument_texts(call) for value in values):
            return ToolLoop("result_fed_back", call.name)
        code = _failure_code(results.get(call.id, ""))
        if code is not None and (call.name, code) in failures:
            return ToolLoop("repeated_failure", call.name)
    return None


# A failure that names the call to make first: `file_edit` of a file not read in the run.
NEEDED_FIRST_BY_CODE: Mapping[str, str] = {"not_read": "file_read"}


def needed_first(messages: Sequence[ChatMessage]) -> str | None:
    """The tool the last step's failures say must be called before anything else (a
    small model told "file_read it first" sent the same edit again): the compact tier's
    next step offers only it, and must call it."""
    last = _last_calls_at(messages)
    if last is None:
        return None
    for message in messages[last + 1 :]:
        code = _failure_code(message.content) if message.role == "tool" else None
        if code is not None and code in NEEDED_FIRST_BY_CODE:
            return NEEDED_FIRST_BY_CODE[code]
    return None


def _last_calls_at(messages: Sequence[ChatMessage]) -> int | None:
    """Index of the assistant message with calls that only its results follow."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "tool":
            continue
        return index if message.role == "assistant" and message.tool_calls else None
    return None


def _failures(calls: Iterable[CallRecord], messages: Iterable[ChatMessage]) -> set[tuple[str, str]]:
    names = {c.id: c.name for c in calls}
    found = set()
    for message in messages:
        if message.role == "tool" and (code := _failure_code(message.content)) is not None:
            found.add((names.get(message.tool_call_id or "", message.name or ""), code))
    return found


def _failure_code(content: str) -> str | None:
    matched = _FAILURE.match(content)
    return matched.group(1) if matched else None


def _values(
    calls: Iterable[CallRecord], messages: Iterable[ChatMessage]
) -> list[tuple[set[str], set[str]]]:
    """Each short successful result as (its words, the words it added to its call's own
    arguments): `2+2 = 4` adds only `4` to `2+2`."""
    asked = {c.id: _words(" ".join(_argument_texts(c))) for c in calls}
    values = []
    for message in messages:
        content = message.content
        if message.role != "tool" or content.startswith("FAILED"):
            continue
        if 0 < len(content.strip()) <= VALUE_RESULT_CHARS:
            words = _words(content)
            values.append((words, words - asked.get(message.tool_call_id or "", set())))
    return values


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def _argument_texts(call: CallRecord) -> list[str]:
    return [
        str(value)
        for key, value in call.arguments.items()
        if key not in REFERENCE_KEYS and isinstance(value, str | int | float)
    ]


def _echoes(argument: str, result: set[str], added: set[str]) -> bool:
    """The result fed back: the argument is made of the result's words only, with numbers
    among them, one of which the result added to its call (an argument that only repeats
    what the call itself said - a tag, a duration - is the caller's own text, not the
    result), and it is the result's value (what it added to its call is a word or three,
    as `4` for `2+2`) or carries two numbers of it at least (a time, a date). A word alone
    ('UTC') also names things, and one number ('1') is too common to tell."""
    words = _words(argument)
    numbers = [w for w in words if any(ch.isdigit() for ch in w)]
    if not numbers or not words <= result or added.isdisjoint(numbers):
        return False
    return len(numbers) >= 2 or len(added) <= 3


def looks_like_call(text: str, tools: Sequence[OfferedTool]) -> bool:
    """Whether a text is a tool call written out rather than an answer: a call the
    parser reads (or a call marker with no usable call), or a bare JSON object of one
    tool's arguments with no name."""
    parsed = parse_tool_calls(text, tools)
    if parsed.calls or parsed.retry:
        return True
    return _bare_arguments(text, tools)


def _bare_arguments(text: str, tools: Sequence[OfferedTool]) -> bool:
    try:
        value = json.loads(_FENCE.sub("", text.strip()))
    except ValueError:
        return False
    if not isinstance(value, dict) or not value:
        return False
    return any(set(value) <= _parameter_names(tool.parameters) for tool in tools)


def _parameter_names(schema: Mapping[str, Any]) -> set[str]:
    props = schema.get("properties")
    return set(props) if isinstance(props, Mapping) else set()
