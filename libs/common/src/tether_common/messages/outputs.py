"""Large tool outputs: store a small blob in one message or a large one in chunks
(begin → chunk … → commit), then page and query it back by ref.

Chunks travel base64 inside a JSON body rather than as raw bytes with metadata in NATS
headers: every message then stays a versioned, validated model on the ordinary `Route`
machinery (one decoder, structured error replies), at the price of a third more bytes on
the wire; 512 KiB of raw data is ~683 KiB of base64, safely under NATS' 1 MiB payload.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from tether_common.messages.base import WireModel, WireRequest
from tether_common.patterns import MAX_PATTERN_CHARS

# Bodies stay well under NATS' default 1 MiB payload after base64 and JSON framing.
MAX_INLINE_BYTES = 512 * 1024
# The largest output a chunked upload accepts (the issue asks for at least 100 MiB).
MAX_OUTPUT_BYTES = 1024 * 1024 * 1024
SHA256_PATTERN = r"^[0-9a-f]{64}$"

Encoding = Literal["utf-8", "base64"]
PageMode = Literal["lines", "bytes", "grep", "json", "csv"]


class PutOutput(WireRequest):
    content_fields = frozenset({"content"})  # bytes (utf-8 or base64), never a text column
    run_id: str
    media_type: str = "text/plain"
    encoding: Encoding = "utf-8"
    content: str = Field(max_length=MAX_INLINE_BYTES * 2)


class OutputStored(WireModel):
    ref: str
    size: int
    sha256: str
    expires_at: datetime
    lines: int = 0


class BeginOutput(WireRequest):
    """Announce an upload; the output becomes visible only when `CommitOutput` verifies it."""

    run_id: str
    media_type: str = "text/plain"
    size: int = Field(ge=0, le=MAX_OUTPUT_BYTES)
    sha256: str = Field(pattern=SHA256_PATTERN)


class UploadStarted(WireModel):
    """Send chunks of exactly `chunk_size` bytes (the last may be shorter), seq from 0."""

    upload_id: str
    chunk_size: int
    chunks: int


class OutputChunk(WireRequest):
    upload_id: str
    seq: int = Field(ge=0, le=MAX_OUTPUT_BYTES)
    data: str = Field(max_length=(MAX_INLINE_BYTES * 4) // 3 + 4)  # base64 of ≤ 512 KiB


class ChunkStored(WireModel):
    upload_id: str
    seq: int


class CommitOutput(WireRequest):
    upload_id: str
    run_id: str


class GetOutput(WireRequest):
    ref: str
    run_id: str
    offset: int = Field(default=0, ge=0, le=MAX_OUTPUT_BYTES)
    limit: int = Field(default=MAX_INLINE_BYTES, ge=1, le=MAX_INLINE_BYTES)


class OutputContent(WireModel):
    ref: str
    size: int
    offset: int
    encoding: Encoding
    content: str
    eof: bool


class QueryOutput(WireRequest):
    """Read a page of an output, or query it server-side.

    `lines`: `limit` lines from line `offset` (0-based); `bytes`: `limit` bytes from
    byte `offset`; `grep`: lines matching `pattern` with `context` lines around them,
    `offset`/`limit` counting matches; `json`: the value at `path`; `csv`: rows
    `offset`..`offset+limit` keeping only `columns` (names or 0-based indexes).
    """

    ref: str
    run_id: str
    # The run tree the caller may read (the brain passes parent and children); the
    # caller's own `run_id` is always allowed.
    allowed_runs: list[str] = Field(default_factory=list, max_length=1000)
    mode: PageMode = "lines"
    offset: int = Field(default=0, ge=0, le=MAX_OUTPUT_BYTES)
    limit: int = Field(default=200, ge=1, le=MAX_INLINE_BYTES)
    pattern: str | None = Field(default=None, max_length=MAX_PATTERN_CHARS)
    context: int = Field(default=0, ge=0, le=20)
    ignore_case: bool = False
    path: str | None = Field(default=None, max_length=500)
    columns: list[str] = Field(default_factory=list, max_length=100)
    max_bytes: int = Field(default=MAX_INLINE_BYTES, ge=256, le=MAX_INLINE_BYTES)


class OutputPage(WireModel):
    ref: str
    mode: PageMode
    size: int
    lines: int
    media_type: str
    offset: int
    encoding: Encoding = "utf-8"
    content: str
    # Where the next page starts (same unit as `offset`); None at the end.
    next_offset: int | None = None
    matches: int | None = None
    note: str | None = None
