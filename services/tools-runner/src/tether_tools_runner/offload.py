"""Offload: a tool result above its threshold goes to the output-store in chunks, and the
model reads a deterministic digest with the `retrieve_output` calls that page the rest.

    text, ref = await maybe_offload(bus, run_id, "shell", output, threshold=threshold_for("shell"))

Nothing large rides one NATS message: small blobs go in one `output_put`, larger ones as
begin → chunk … → commit with a few chunks in flight, and the output becomes readable only
when the store has verified the whole content at commit.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Mapping

from tether_common.bus import Bus
from tether_common.digest import digest
from tether_common.errors import TetherError
from tether_common.messages.outputs import (
    BeginOutput,
    CommitOutput,
    OutputChunk,
    OutputStored,
    PutOutput,
)

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 8 * 1024
# Per-tool thresholds in bytes; shell output is mostly noise, so the model sees less of it.
DEFAULT_THRESHOLDS: Mapping[str, int] = {"shell": 4 * 1024}
# Up to this size one `output_put` message carries the blob (base64 keeps it < 1 MiB).
SINGLE_PUT_BYTES = 256 * 1024
# Chunk requests in flight per upload: enough to keep the store busy, bounded memory.
WINDOW = 8
TIMEOUT_S = 30.0


def threshold_for(
    name: str, overrides: Mapping[str, int] | None = None, default: int = DEFAULT_THRESHOLD
) -> int:
    """The offload threshold of tool `name`: an override, the shell default, or `default`."""
    table = {**DEFAULT_THRESHOLDS, **(overrides or {})}
    return table.get(name, default)


async def upload(
    bus: Bus, run_id: str, data: bytes, *, media_type: str = "text/plain"
) -> OutputStored:
    """Store `data` in the output-store; returns its ref, size and sha256."""
    if len(data) <= SINGLE_PUT_BYTES:
        body = PutOutput(
            run_id=run_id,
            media_type=media_type,
            encoding="base64",
            content=base64.b64encode(data).decode(),
        )
        return await bus.request(bus.subjects.output_put, body, timeout=TIMEOUT_S)
    begin = BeginOutput(
        run_id=run_id,
        media_type=media_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    started = await bus.request(bus.subjects.output_begin, begin, timeout=TIMEOUT_S)
    await send_chunks(bus, started.upload_id, memoryview(data), started.chunk_size)
    commit = CommitOutput(upload_id=started.upload_id, run_id=run_id)
    # The store re-reads the whole output at commit to verify it: allow for its size.
    return await bus.request(
        bus.subjects.output_commit, commit, timeout=TIMEOUT_S + len(data) / 20e6
    )


async def send_chunks(bus: Bus, upload_id: str, data: memoryview, chunk_size: int) -> None:
    """Every chunk, `WINDOW` at a time; a failed chunk cancels the rest (TaskGroup)."""
    gate = asyncio.Semaphore(WINDOW)

    async def send(seq: int) -> None:
        try:
            piece = data[seq * chunk_size : (seq + 1) * chunk_size]
            body = OutputChunk(upload_id=upload_id, seq=seq, data=base64.b64encode(piece).decode())
            await bus.request(bus.subjects.output_chunk, body, timeout=TIMEOUT_S)
        finally:
            gate.release()

    async with asyncio.TaskGroup() as group:
        for seq in range(-(-len(data) // chunk_size)):
            await gate.acquire()  # a task only as the window opens: bounded memory
            group.create_task(send(seq))


def cut(text: str, threshold: int) -> str:
    """Head and tail of `text` within `threshold` bytes, for when the store is unreachable."""
    half = max(threshold // 2 - 100, 0)
    data = text.encode()
    head = data[:half].decode(errors="ignore")
    tail = data[-half:].decode(errors="ignore")
    skipped = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n...[{skipped} bytes not shown: the output-store is unavailable]...\n{tail}"


async def maybe_offload(
    bus: Bus,
    run_id: str,
    name: str,
    content: bytes | str,
    *,
    threshold: int,
    media_type: str | None = None,
) -> tuple[str, str | None]:
    """(what the model sees, the ref or None). Under `threshold` bytes: the content as is;
    above it: the digest of the stored output. Never raises: when the store cannot be
    reached the model gets the head and tail of the content with a note."""
    data = content.encode() if isinstance(content, str) else content
    if len(data) <= threshold:
        return (content if isinstance(content, str) else data.decode(errors="replace")), None
    try:
        stored = await upload(bus, run_id, data, media_type=media_type or "text/plain")
    except TetherError as exc:
        log.warning("offload of %s for run %s failed: %s", name, run_id, exc.code)
        return cut(data.decode(errors="replace"), threshold), None
    return digest(data, ref=stored.ref, media_type=media_type, kind_hint=name), stored.ref


__all__ = ["DEFAULT_THRESHOLD", "DEFAULT_THRESHOLDS", "maybe_offload", "threshold_for", "upload"]
