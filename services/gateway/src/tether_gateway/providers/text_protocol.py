"""How a model is asked for tool calls, as its profile says: wraps any adapter.

`native` profiles go to the adapter as they are. Every provider's calls are then fitted
to the offered tools by the gateway's handler (`fitted`: a near or alias name, key
synonyms, a missing name inferred from the keys), and what was changed travels on the
call's `repairs`.

`text` profiles get the text protocol: the tool prompt (`render_tool_prompt`) is put at
the *start* of the system message, ahead of the brain's text (which carries the date and
the run's budget), so the long stable part of the prompt is a prefix a server's prompt
cache reuses from step to step and run to run; no native tools are sent, and earlier
calls and results in the history are rewritten as the fenced text the model was taught.
The streamed text is split as it arrives: `<think>` blocks become `thinking`, and while
tools are on offer everything from the first call marker on is held back, so call JSON
never flashes in the visible `chunk` stream. At the end the calls are parsed out
(`parse_tool_calls`) and emitted as `tool_call` events with generated ids; a marker
without a usable call ends with `finish_reason="unusable_call"`.

`text` profiles with `grammar` are asked through an adapter that can constrain decoding:
the reply schema (`reply_schema`: one branch per tool and an answer branch) goes with the
request, the prompt teaches that one-object reply, and the whole reply is read at the end
(`read_reply`, falling back to the ordinary parser for a reply cut short). With no tools
on offer (the brain's tools-off final round) the schema is the answer branch alone, so a
small model cannot write a raw call as its final answer; with `tool_choice="required"`
(the brain's first step of a request that plainly needs a tool) it is the call branches
alone, so the model cannot answer with a value it made up. The prompt is the same either
way, so the cached prefix is too. An adapter that cannot constrain gets the plain text
protocol (and `required` is then only asked, not enforced). Under the grammar the prompt
may list more tools than the request offers (`listed_tools`: the local provider keeps a
run's list from step to step, so a narrower or tools-off step keeps the cached prefix);
the schema, built from the request's own tools, still admits only those.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Literal, assert_never

from tether_common.messages.gateway import (
    ChatMessage,
    ChunkEvent,
    DoneEvent,
    ErrorEvent,
    GenerateRequest,
    ModelEvent,
    OfferedToolSpec,
    ThinkingEvent,
    ToolCallEvent,
    UsageEvent,
)
from tether_common.messages.profiles import ModelProfile
from tether_common.toolcalls import (
    CALL_MARKERS,
    TOOL_FENCE,
    TOOL_KEY,
    find_call_marker,
    parse_tool_calls,
    read_reply,
    render_tool_prompt,
    reply_schema,
)
from tether_common.toolcalls.model import ParseResult
from tether_gateway.profiles import Profiles
from tether_gateway.providers.base import Provider, new_call_id
from tether_gateway.providers.hosted import HostedProvider
from tether_gateway.providers.turn import UNUSABLE_CALL

Piece = tuple[Literal["chunk", "thinking"], str]

_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_OPEN_TAGS = ("<think>", "<thinking>", "<reasoning>")


class TextProtocol:
    """`inner`, asked the way each request's model profile says (see the module)."""

    def __init__(self, inner: Provider, profiles: Profiles) -> None:
        self.inner = inner
        self.profiles = profiles

    @property
    def name(self) -> str:
        return self.inner.name

    def profile(self, request: GenerateRequest) -> ModelProfile:
        return self.profiles.get(self.name, request.model)

    def listed_tools(self, request: GenerateRequest) -> Sequence[OfferedToolSpec]:
        """The tools a grammar-constrained prompt lists: the request's own here."""
        return request.tools

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        async with aclosing(self._events(request)) as events:
            async for event in events:
                yield event

    def _events(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        profile = self.profile(request)
        if profile.tool_calling == "native":
            return self.inner.generate(request)
        if profile.grammar and isinstance(self.inner, HostedProvider):
            return self._constrained(request, self.inner)
        return self._textual(request)

    async def _textual(self, request: GenerateRequest) -> AsyncGenerator[ModelEvent, None]:
        splitter = TextSplitter(hold_calls=bool(request.tools))
        usage: list[UsageEvent] = []
        async with aclosing(self.inner.generate(textual_request(request))) as events:
            async for event in events:
                match event:
                    case ChunkEvent():
                        for piece_event in as_events(splitter.feed(event.text)):
                            yield piece_event
                    case UsageEvent():
                        usage.append(event)  # reported after the calls, as the stream orders
                    case ThinkingEvent() | ToolCallEvent():
                        yield event
                    case DoneEvent():
                        for closing in finish(splitter, request.tools, event.finish_reason):
                            if isinstance(closing, DoneEvent):
                                for report in usage:
                                    yield report
                            yield closing
                        return
                    case ErrorEvent():
                        yield event
                        return
                    case _:
                        assert_never(event)

    async def _constrained(
        self, request: GenerateRequest, inner: HostedProvider
    ) -> AsyncGenerator[ModelEvent, None]:
        """The whole reply is one JSON object, so it is held and read at the end."""
        text: list[str] = []
        usage: list[UsageEvent] = []
        asked = textual_request(request, json_reply=True, listed=self.listed_tools(request))
        schema = reply_schema(request.tools, answer=request.tool_choice != "required")
        async with aclosing(inner.generate(asked, response_schema=schema)) as events:
            async for event in events:
                match event:
                    case ChunkEvent():
                        text.append(event.text)
                    case UsageEvent():
                        usage.append(event)  # after the answer and calls, as streams order
                    case DoneEvent():
                        *found, done = read_constrained("".join(text), request.tools)
                        for closing in (*found, *usage, done):
                            yield closing
                        return
                    case ThinkingEvent() | ToolCallEvent() | ErrorEvent():
                        yield event
                    case _:
                        assert_never(event)


def read_constrained(text: str, tools: Sequence[OfferedToolSpec]) -> list[ModelEvent]:
    """A grammar-constrained reply as events: the answer, or the call, then done."""
    outcome = read_reply(text, tools) or parse_tool_calls(text, tools)
    return [*outcome_events(outcome, visible=""), DoneEvent(finish_reason=_reason(outcome))]


def outcome_events(outcome: ParseResult, *, visible: str) -> list[ModelEvent]:
    """The reasoning, the text (joined to what was already shown) and the calls."""
    events: list[ModelEvent] = []
    if outcome.reasoning:
        events.append(ThinkingEvent(text=outcome.reasoning))
    if outcome.text:
        joiner = " " if visible and not visible[-1].isspace() else ""
        events.append(ChunkEvent(text=joiner + outcome.text))
    events.extend(
        ToolCallEvent(
            id=new_call_id(), name=call.name, arguments=call.args, repairs=list(call.repairs)
        )
        for call in outcome.calls
    )
    return events


def _reason(outcome: ParseResult, default: str = "stop") -> str:
    if outcome.calls:
        return "tool_calls"
    return UNUSABLE_CALL if outcome.retry else default


def finish(
    splitter: TextSplitter, tools: Sequence[OfferedToolSpec], finish_reason: str
) -> list[ModelEvent]:
    """The held-back text parsed: its visible rest, its reasoning, the calls, then done."""
    events = as_events(splitter.finish())
    if not tools:
        return [*events, DoneEvent(finish_reason=finish_reason)]
    held = splitter.held or ""
    # Calls come from all the visible text, so formats with no marker are found too.
    outcome = parse_tool_calls(splitter.shown + held, tools)
    rest = parse_tool_calls(held, tools) if held else None
    shown = ParseResult(
        calls=outcome.calls,
        retry=outcome.retry,
        text=rest.text if rest else "",
        reasoning=rest.reasoning if rest else "",
    )
    events.extend(outcome_events(shown, visible=splitter.shown))
    return [*events, DoneEvent(finish_reason=_reason(outcome, finish_reason))]


def as_events(pieces: list[Piece]) -> list[ModelEvent]:
    return [
        ChunkEvent(text=text) if kind == "chunk" else ThinkingEvent(text=text)
        for kind, text in pieces
    ]


def textual_request(
    request: GenerateRequest,
    *,
    json_reply: bool = False,
    listed: Sequence[OfferedToolSpec] | None = None,
) -> GenerateRequest:
    """The request as a model without native tools must see it: the tool prompt (listing
    `listed`, by default the request's tools) first in the system message, so the stable
    text leads and a prompt cache can reuse it."""
    messages = text_history(request.messages, json_reply=json_reply)
    prompt = render_tool_prompt(request.tools if listed is None else listed, json_reply=json_reply)
    if prompt:
        first = messages[0] if messages else None
        if first is not None and first.role == "system":
            content = f"{prompt}\n\n{first.content}" if first.content else prompt
            messages[0] = first.model_copy(update={"content": content})
        else:
            messages.insert(0, ChatMessage(role="system", content=prompt))
    return request.model_copy(update={"messages": messages, "tools": []})


def text_history(messages: Sequence[ChatMessage], *, json_reply: bool = False) -> list[ChatMessage]:
    """Calls as the prompt teaches them (fenced blocks, or bare objects for `json_reply`),
    results as user messages; adjacent user messages merged, since some chat templates
    insist that roles alternate."""
    out: list[ChatMessage] = []
    # A model under the reply grammar sees its calls as it wrote them (`"tool"` first); a
    # history in another shape teaches a small model a second form beside the grammar's.
    key = TOOL_KEY if json_reply else "name"
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            written = [json.dumps({key: c.name, "args": c.arguments}) for c in message.tool_calls]
            fences = written if json_reply else [f"{TOOL_FENCE}\n{w}\n```" for w in written]
            text = "\n\n".join([message.content, *fences] if message.content else fences)
            message = ChatMessage(role="assistant", content=text)
        elif message.role == "tool":
            label = f"Result of {message.name or 'the tool'} (call {message.tool_call_id}):"
            message = ChatMessage(role="user", content=f"{label}\n{message.content}")
        if out and message.role == "user" and out[-1].role == "user":
            out[-1] = ChatMessage(role="user", content=f"{out[-1].content}\n\n{message.content}")
        else:
            out.append(message)
    return out


class TextSplitter:
    """Splits text as it streams in into visible text and reasoning; with `hold_calls`,
    keeps everything from the first call marker on in `held`. A tail that might be the
    start of a tag or marker waits for the next piece before it is classified."""

    def __init__(self, *, hold_calls: bool) -> None:
        self.hold_calls = hold_calls
        self.pending = ""
        self.closing: str | None = None  # the closing tag awaited inside a reasoning block
        self.held: str | None = None
        self.shown = ""

    def feed(self, text: str) -> list[Piece]:
        if self.held is not None:
            self.held += text
            return []
        self.pending += text
        return self._drain(final=False)

    def finish(self) -> list[Piece]:
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> list[Piece]:
        pieces: list[Piece] = []
        while self.pending and self.held is None:
            step = self._in_reasoning if self.closing is not None else self._in_text
            if not step(pieces, final=final):
                break
        for kind, text in pieces:
            if kind == "chunk":
                self.shown += text
        return _merged(pieces)

    def _in_reasoning(self, pieces: list[Piece], *, final: bool) -> bool:
        assert self.closing is not None
        closed = re.search(re.escape(self.closing), self.pending, re.IGNORECASE)
        if closed is not None:
            pieces.append(("thinking", self.pending[: closed.start()]))
            self.pending = self.pending[closed.end() :]
            self.closing = None
            return True
        keep = 0 if final else _partial_tail(self.pending, (self.closing,))
        self._emit("thinking", pieces, keep)
        return False

    def _in_text(self, pieces: list[Piece], *, final: bool) -> bool:
        opened = _OPEN.search(self.pending)
        marker = find_call_marker(self.pending) if self.hold_calls else -1
        if marker >= 0 and (opened is None or marker < opened.start()):
            pieces.append(("chunk", self.pending[:marker]))
            self.held, self.pending = self.pending[marker:], ""
            return False
        if opened is not None:
            pieces.append(("chunk", self.pending[: opened.start()]))
            self.closing = f"</{opened.group(1).lower()}>"
            self.pending = self.pending[opened.end() :]
            return True
        starts = _OPEN_TAGS + (CALL_MARKERS if self.hold_calls else ())
        self._emit("chunk", pieces, 0 if final else _partial_tail(self.pending, starts))
        return False

    def _emit(self, kind: Literal["chunk", "thinking"], pieces: list[Piece], keep: int) -> None:
        cut = len(self.pending) - keep
        pieces.append((kind, self.pending[:cut]))
        self.pending = self.pending[cut:]


def _partial_tail(text: str, starts: Sequence[str]) -> int:
    """Length of the longest end of `text` that could grow into one of `starts`."""
    lowered = text[-max(len(s) for s in starts) :].lower()
    for size in range(len(lowered), 0, -1):
        tail = lowered[-size:]
        if any(len(s) > size and s.lower().startswith(tail) for s in starts):
            return size
    return 0


def _merged(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for kind, text in pieces:
        if not text:
            continue
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out
