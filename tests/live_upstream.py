"""An OpenAI-compatible model that writes each piece of its answer only when the test
releases it, so a test sees live text arrive while the model is still writing."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from tether_gateway.testing import FakeUpstream, Reply, sse

MODEL = "live-model"


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"object": "chat.completion.chunk", "model": MODEL, "choices": [choice]})


@dataclass
class GatedAnswer:
    """One streamed answer: its text pieces, each written on one `release()`."""

    pieces: list[str]
    gate: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self.gate.release()

    def release_all(self) -> None:
        self.release(len(self.pieces))


class GatedUpstream(FakeUpstream):
    """`FakeUpstream` whose queued `GatedAnswer`s go out piece by piece, as released; a
    plain `Reply` queued with `queue` is written at once, as the base class does."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: deque[GatedAnswer] = deque()

    async def __aenter__(self) -> GatedUpstream:
        await super().__aenter__()
        return self

    def answer(self, *pieces: str) -> GatedAnswer:
        """Queue an answer written in `pieces`; the test releases them."""
        gated = GatedAnswer(list(pieces))
        self.answers.append(gated)
        self.queue(Reply(pieces=[b"gated"]))  # a placeholder the writer replaces
        return gated

    async def _answer(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if list(reply.pieces) != [b"gated"]:
            return await super()._answer(reply, reader, writer)
        gated = self.answers.popleft()
        writer.write(HEAD)
        _write(writer, _chunk({"role": "assistant", "content": ""}))
        await writer.drain()
        gated.started.set()
        for piece in gated.pieces:
            await gated.gate.acquire()
            _write(writer, _chunk({"content": piece}))
            await writer.drain()
        usage = {"prompt_tokens": 10, "completion_tokens": len(gated.pieces), "total_tokens": 20}
        for end in (
            _chunk({}, "stop"),
            sse({"object": "chat.completion.chunk", "model": MODEL, "choices": [], "usage": usage}),
            sse("[DONE]"),
        ):
            _write(writer, end)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _write(writer: asyncio.StreamWriter, piece: bytes) -> None:
    writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
