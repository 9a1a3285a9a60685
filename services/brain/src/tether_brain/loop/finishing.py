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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether_brain.state.run import RunState, call_key
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


def loop_in(messages: Sequence[ChatMessage], read: Digest | None = None) -> ToolLoop | None:
    """The loop the last step's calls made, if any. Only when the history ends with that
    step's results: an answer or a user message since then starts afresh. `read`: what
    an earlier step read of the same history, so only the messages added since are read
    (a run keeps one: `digest_of`); the answer is the same with or without it."""
    last = _last_calls_at(messages)
    if last is None:
        return None
    before = (read if read is not None else Digest()).upto(messages, last)
    batch = messages[last]
    results = {m.tool_call_id: m.content for m in messages[last + 1 :] if m.role == "tool"}
    for call in batch.tool_calls:
        if call_key(call.name, call.arguments) in before.seen:
            return ToolLoop("repeated_call", call.name)
        if any(before.echoed(arg) for arg in _argument_texts(call)):
            return ToolLoop("result_fed_back", call.name)
        code = _failure_code(results.get(call.id, ""))
        if code is not None and (call.name, code) in before.failures:
            return ToolLoop("repeated_failure", call.name)
    return None


@dataclass(slots=True)
class Digest:
    """What the rules read of the calls and results of a history's first `count`
    messages: the calls made, each short successful result as (its words, the words it
    added to its call's own arguments: `2+2 = 4` adds only `4` to `2+2`), and each
    tool's failures. A run's history only grows (the journal is append-only), so it reads
    on from where it stopped while the last message it read is still in place, and from
    the start otherwise (another history, one loaded afresh): a step costs the same at
    step 500 as at step 5."""

    seen: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)
    asked: dict[str, set[str]] = field(default_factory=dict)
    values: list[tuple[set[str], set[str]]] = field(default_factory=list)
    by_added: dict[str, list[int]] = field(default_factory=dict)  # number -> values adding it
    failures: set[tuple[str, str]] = field(default_factory=set)
    count: int = 0
    last: ChatMessage | None = None

    def upto(self, messages: Sequence[ChatMessage], end: int) -> Digest:
        if end < self.count or (self.count and messages[self.count - 1] is not self.last):
            self.clear()
        for message in messages[self.count : end]:
            self._read(message)
        self.count = end
        self.last = messages[end - 1] if end else None
        return self

    def clear(self) -> None:
        for kept in (self.seen, self.names, self.asked, self.values, self.by_added):
            kept.clear()
        self.failures.clear()
        self.count, self.last = 0, None

    def echoed(self, argument: str) -> bool:
        """An earlier result fed back as this argument (`_echoes`), looked up by the
        numbers the argument holds: only results that added one of them can match."""
        numbers = {w for w in _words(argument) if any(ch.isdigit() for ch in w)}
        candidates = {i for n in numbers for i in self.by_added.get(n, ())}
        return any(_echoes(argument, *self.values[i]) for i in sorted(candidates))

    def _read(self, message: ChatMessage) -> None:
        for call in message.tool_calls:
            self.seen.add(call_key(call.name, call.arguments))
            self.names[call.id] = call.name
            self.asked[call.id] = _words(" ".join(_argument_texts(call)))
        if message.role != "tool":
            return
        call_id, content = message.tool_call_id or "", message.content
        if (code := _failure_code(content)) is not None:
            self.failures.add((self.names.get(call_id, message.name or ""), code))
        if content.startswith("FAILED") or not 0 < len(content.strip()) <= VALUE_RESULT_CHARS:
            return
        words = _words(content)
        added = words - self.asked.get(call_id, set())
        for word in added:
            if any(ch.isdigit() for ch in word):
                self.by_added.setdefault(word, []).append(len(self.values))
        self.values.append((words, added))


def digest_of(state: RunState) -> Digest:
    """The run's own `Digest` (in memory only: a replica that loads the run reads its
    history once, at its first step)."""
    if not isinstance(state.read_ahead, Digest):
        state.read_ahead = Digest()
    return state.read_ahead


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


def _failure_code(content: str) -> str | None:
    matched = _FAILURE.match(content)
    return matched.group(1) if matched else None


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
