"""A shipped fake for adapter tests: a scripted HTTP/1.1 upstream on a free local port.

It answers each request with the next queued `Reply`, written byte for byte as chunked
transfer encoding, and can end a reply cleanly, drop the connection mid-body, or stall
until the client hangs up (`hung_up` is then set). It records every request it got.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

from tether_common.messages.gateway import ModelEvent

__all__ = [
    "FakeUpstream",
    "Received",
    "RecordingSleep",
    "Reply",
    "chat_call_stream",
    "chat_text_stream",
    "collect",
    "ndjson",
    "sse",
]


async def collect(events: AsyncIterator[ModelEvent]) -> list[ModelEvent]:
    """Every event of one generation."""
    return [event async for event in events]


class RecordingSleep:
    """A stand-in for `asyncio.sleep` in retry policies: records the delay, waits not."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One Server-Sent Event as a provider writes it."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def _chat_chunk(model: str, delta: Mapping[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"object": "chat.completion.chunk", "model": model, "choices": [choice]})


def _chat_end(model: str, finish: str) -> list[bytes]:
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    return [
        _chat_chunk(model, {}, finish),
        sse({"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}),
        sse("[DONE]"),
    ]


def chat_text_stream(text: str, model: str, *, piece: int = 7) -> Reply:
    """`text` as a Chat Completions stream in small deltas, then usage and `[DONE]`."""
    pieces = [_chat_chunk(model, {"role": "assistant", "content": ""})]
    pieces += [
        _chat_chunk(model, {"content": text[i : i + piece]}) for i in range(0, len(text), piece)
    ]
    return Reply(pieces=[*pieces, *_chat_end(model, "stop")])


def chat_call_stream(name: str, arguments: Mapping[str, Any], model: str) -> Reply:
    """One native tool call as a Chat Completions stream, its arguments in two deltas."""
    text = json.dumps(arguments)
    half = len(text) // 2
    start = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    pieces = [
        _chat_chunk(model, {"role": "assistant", "tool_calls": [start]}),
        _chat_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": text[:half]}}]}),
        _chat_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": text[half:]}}]}),
    ]
    return Reply(pieces=[*pieces, *_chat_end(model, "tool_calls")])


def ndjson(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted response; `gap_s` spaces the pieces so they arrive as separate reads."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    pieces: Sequence[bytes] = ()
    end: Literal["complete", "drop", "stall"] = "complete"
    gap_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeUpstream:
    """`async with FakeUpstream() as upstream:` then `upstream.queue(Reply(...))`."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.hung_up = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None, "use FakeUpstream as an async context manager"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def __aenter__(self) -> FakeUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=5)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self._writers.add(writer)
        try:
            while (request := await _read_request(reader)) is not None:
                self.received.append(request)
                reply = self.replies.popleft() if self.replies else Reply(status=599)
                if not await self._answer(reply, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; that is what some tests are about
        finally:
            self._writers.discard(writer)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._handlers.discard(task)

    async def _answer(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Write `reply`; True when the connection may serve another request."""
        writer.write(_head(reply))
        for index, piece in enumerate(reply.pieces):
            if index and reply.gap_s:
                await asyncio.sleep(reply.gap_s)
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
        if reply.end == "drop":
            writer.transport.abort()  # no terminating chunk: the body is cut short
            return False
        if reply.end == "stall":
            while await reader.read(1024):
                pass
            self.hung_up.set()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _head(reply: Reply) -> bytes:
    try:
        phrase = HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {reply.status} {phrase}"]
    headers = {"content-type": "text/event-stream", **reply.headers}
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    lines.append("transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed a kept-alive connection
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in header_lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, path, headers, body)
