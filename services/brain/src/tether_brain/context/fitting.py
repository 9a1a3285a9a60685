"""Fitting a request into the model's context window. Tokens are estimated (characters /
3.5 + 6 per message); a reserve of clamp(window/4, 256, 2048) is kept for the answer; each
tool result is capped. When still over, room is freed in this order: old tool results cut
to 400 characters, old history dropped (or summarised, by the caller, from `dropped`),
newest results cut, the longest message trimmed. The user's prompt is never trimmed, and
the stored history is never changed: only what one request carries."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether_brain.context.memo import IdentityMemo
from tether_brain.state.run import RunState
from tether_brain.state.sizes import message_chars
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec

CHARS_PER_TOKEN = 3.5
TOKENS_PER_MESSAGE = 6
RESULT_CAP_CHARS = 12_000
OLD_RESULT_CHARS = 400
NEWEST_RESULT_CHARS = 1_500
CUT_NOTE = "… [cut to fit the context window]"


def estimate(messages: Sequence[ChatMessage], tools: Sequence[OfferedToolSpec] = ()) -> int:
    return _tokens(sum(map(message_chars, messages)), len(messages), tools)


def request_estimate(request: GenerateRequest, state: RunState) -> int:
    """`estimate(request.messages, request.tools)`, the same number, without walking the
    run's history: when the request carries the history unchanged after its system
    prompt (the same message objects: no skill note left out, no loaded skill forgotten),
    its size is the running total the run keeps (`RunState.history_chars`)."""
    messages, history = request.messages, state.messages
    n = len(history)
    carried = messages[1 : n + 1]
    if n and len(carried) == n and all(map(operator.is_, carried, history)):
        chars = state.history_chars + sum(map(message_chars, [*messages[:1], *messages[n + 1 :]]))
    else:
        chars = sum(map(message_chars, messages))
    return _tokens(chars, len(messages), request.tools)


def _tokens(messages_chars: int, count: int, tools: Sequence[OfferedToolSpec]) -> int:
    chars = messages_chars + sum(map(_tool_chars, tools))
    return int(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * count


# A tool's size, counted once per spec: the toolbox offers the same spec objects step
# after step (`str` of a schema is most of an estimate's cost otherwise).
_tool_chars: IdentityMemo[OfferedToolSpec, int] = IdentityMemo(
    lambda tool: len(tool.description) + len(str(tool.parameters)), size=512
)


def reserve(window: int) -> int:
    return min(max(window // 4, 256), 2048)


def _cut(message: ChatMessage, chars: int) -> ChatMessage:
    if len(message.content) <= chars:
        return message
    return message.model_copy(update={"content": message.content[:chars] + CUT_NOTE})


@dataclass(slots=True)
class Fitted:
    messages: list[ChatMessage]
    dropped: list[ChatMessage] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


class Fitter:
    """`fit(messages, tools)` for one model window; messages[0] is the system prompt."""

    def __init__(self, window: int, prompt: str) -> None:
        self.window = window
        self.prompt = prompt
        self.budget = window - reserve(window)

    def over(self, messages: Sequence[ChatMessage], tools: Sequence[OfferedToolSpec]) -> bool:
        return estimate(messages, tools) > self.budget

    def request_over(self, request: GenerateRequest, state: RunState) -> bool:
        """`over(request.messages, request.tools)` by the run's running total."""
        return request_estimate(request, state) > self.budget

    def fit(self, messages: list[ChatMessage], tools: Sequence[OfferedToolSpec]) -> Fitted:
        fitted = Fitted([_cut(m, RESULT_CAP_CHARS) if m.role == "tool" else m for m in messages])
        for step in (
            self._cut_old_results,
            self._drop_history,
            self._cut_newest,
            self._trim_longest,
        ):
            if not self.over(fitted.messages, tools):
                break
            step(fitted)
        return fitted

    def _latest_turn(self, messages: list[ChatMessage], after: int = 0) -> int:
        """Index of the last assistant message with calls (after `after`): results after
        it are 'newest'."""
        return max(
            (
                i
                for i, m in enumerate(messages)
                if i > after and m.role == "assistant" and m.tool_calls
            ),
            default=len(messages),
        )

    def _prompt_at(self, messages: list[ChatMessage]) -> int:
        """Index of the user's prompt: the last user message holding it (a thread's
        earlier turns come before it), else the first user message."""
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role == "user" and messages[i].content == self.prompt:
                return i
        return next((i for i, m in enumerate(messages) if m.role == "user"), 0)

    def _cut_old_results(self, fitted: Fitted) -> None:
        newest = self._latest_turn(fitted.messages, self._prompt_at(fitted.messages))
        fitted.messages = [
            _cut(m, OLD_RESULT_CHARS) if m.role == "tool" and i < newest else m
            for i, m in enumerate(fitted.messages)
        ]
        fitted.actions.append("old tool results cut")

    def _drop_history(self, fitted: Fitted) -> None:
        """Drop whole exchanges, oldest first, keeping the system prompt, the user's
        prompt (with this turn's skill note), the latest turn, and assistant calls paired
        with their results. A thread's earlier turns come before the prompt: they go first."""
        messages = fitted.messages
        prompt = self._prompt_at(messages)
        start = prompt - 1 if prompt > 1 and messages[prompt - 1].role == "system" else prompt
        newest = self._latest_turn(messages, prompt)
        head, earlier, kept = messages[:1], messages[1:start], messages[start : prompt + 1]
        middle, tail = messages[prompt + 1 : newest], messages[newest:]
        for part in (earlier, middle):
            while part and self.over(head + earlier + kept + middle + tail, ()):
                fitted.dropped.append(part.pop(0))
                while part and part[0].role == "tool":  # results go with their call
                    fitted.dropped.append(part.pop(0))
        if fitted.dropped:
            note = ChatMessage(
                role="system",
                content=f"[{len(fitted.dropped)} earlier messages were left out to fit the context window]",
            )
            fitted.messages = [*head, *earlier, *kept, note, *middle, *tail]
            fitted.actions.append(f"{len(fitted.dropped)} messages dropped")

    def _cut_newest(self, fitted: Fitted) -> None:
        fitted.messages = [
            _cut(m, NEWEST_RESULT_CHARS) if m.role == "tool" else m for m in fitted.messages
        ]
        fitted.actions.append("newest tool results cut")

    def _trim_longest(self, fitted: Fitted) -> None:
        candidates = [
            i
            for i, m in enumerate(fitted.messages)
            if not (m.role == "user" and m.content == self.prompt)
        ]
        if not candidates:
            return
        index = max(candidates, key=lambda i: len(fitted.messages[i].content))
        excess = (estimate(fitted.messages) - self.budget) * CHARS_PER_TOKEN
        keep = max(int(len(fitted.messages[index].content) - excess), 200)
        fitted.messages[index] = _cut(fitted.messages[index], keep)
        fitted.actions.append("longest message trimmed")
