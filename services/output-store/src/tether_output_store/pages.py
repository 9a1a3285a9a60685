"""Pages of a stored output: by line (text) or by byte (binary), cut to `max_bytes`.

Line paging finds its first chunk from the per-chunk newline counts and reads forward
only as far as the page needs, so page 5,000 of a 100 MiB log costs what page 1 costs.
"""

from __future__ import annotations

import base64
import bisect
import itertools
from contextlib import aclosing

from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.outputs import OutputPage, PageMode, QueryOutput
from tether_output_store.store import OutputStore, StoredOutput


def page_of(stored: StoredOutput, query: QueryOutput, content: str, **extra: object) -> OutputPage:
    return OutputPage.model_validate(
        {
            "ref": stored.ref,
            "mode": query.mode,
            "size": stored.size,
            "lines": stored.lines,
            "media_type": stored.media_type,
            "offset": query.offset,
            "content": content,
            **extra,
        }
    )


def nth_newline(data: bytes, n: int) -> int:
    """Index just after the `n`-th newline (1-based) of `data`; -1 if there are fewer."""
    pos = -1
    for _ in range(n):
        pos = data.find(b"\n", pos + 1)
        if pos < 0:
            return -1
    return pos + 1


def start_of_line(stored: StoredOutput, line: int) -> tuple[int, int]:
    """(chunk index, position in it) where line `line` (0-based) begins."""
    if line == 0:
        return 0, 0
    totals = list(itertools.accumulate(stored.chunk_lines))
    index = bisect.bisect_left(totals, line)
    before = totals[index - 1] if index else 0
    return index, line - before  # the position is resolved by newline count in the chunk


async def read_lines(
    store: OutputStore, stored: StoredOutput, offset: int, limit: int, max_bytes: int
) -> tuple[bytes, int]:
    """Up to `limit` whole lines from line `offset`, at most `max_bytes`; returns the bytes
    and how many lines they hold (0 when one line alone is longer than `max_bytes`)."""
    index, skip_newlines = start_of_line(stored, offset)
    buf = bytearray()
    async with aclosing(store.iter_chunks(stored, index)) as pieces:
        async for piece in pieces:
            if skip_newlines:
                piece = piece[nth_newline(piece, skip_newlines) :]
                skip_newlines = 0
            buf += piece
            if buf.count(b"\n") >= limit or len(buf) > max_bytes:
                break
    end = nth_newline(bytes(buf), limit)
    taken = bytes(buf) if end < 0 else bytes(buf[:end])
    if len(taken) > max_bytes:
        cut = taken.rfind(b"\n", 0, max_bytes)
        taken = taken[: cut + 1] if cut >= 0 else b""
    lines = taken.count(b"\n") + (1 if taken and not taken.endswith(b"\n") else 0)
    return taken, lines


async def lines_page(store: OutputStore, stored: StoredOutput, query: QueryOutput) -> OutputPage:
    if query.offset >= stored.lines:
        past = f"line {query.offset} is past the end ({stored.lines} lines)."
        return page_of(stored, query, "", note=past)
    data, count = await read_lines(store, stored, query.offset, query.limit, query.max_bytes)
    if count == 0:
        long_line = (
            f"line {query.offset} is longer than {query.max_bytes} bytes; page it with "
            f'mode "bytes".'
        )
        return page_of(stored, query, "", note=long_line, next_offset=query.offset)
    following = query.offset + count
    note: str | None = None
    if count < query.limit and following < stored.lines:
        note = f"cut at {len(data)} bytes ({count} lines); continue at offset {following}."
    return page_of(
        stored,
        query,
        data.decode(errors="replace"),
        next_offset=following if following < stored.lines else None,
        note=note,
    )


async def bytes_page(store: OutputStore, stored: StoredOutput, query: QueryOutput) -> OutputPage:
    # base64 grows by a third: read less so the encoded page still fits `max_bytes`.
    budget = min(query.limit, query.max_bytes)
    data = await store.read(stored, query.offset, budget)
    try:
        content, encoding = data.decode(), "utf-8"
    except UnicodeDecodeError:  # binary, or a page cut inside a character
        data = data[: query.max_bytes * 3 // 4]
        content, encoding = base64.b64encode(data).decode(), "base64"
    following = query.offset + len(data)
    return page_of(
        stored,
        query,
        content,
        encoding=encoding,
        next_offset=following if following < stored.size else None,
    )


def check_size(stored: StoredOutput, cap: int, mode: PageMode) -> None:
    """Refuse to parse an output larger than `cap` (JSON and CSV queries parse it whole)."""
    if stored.size > cap:
        raise MessageError(
            f'output is {stored.size} bytes; mode "{mode}" parses at most {cap}. '
            'Use mode "grep" or "lines" instead.',
            code=ErrorCode.TOO_LARGE,
        )


async def whole(store: OutputStore, stored: StoredOutput, cap: int, mode: PageMode) -> bytes:
    """The whole content, for queries that must parse it (JSON, CSV); refused above `cap`."""
    check_size(stored, cap, mode)
    parts = [piece async for piece in store.iter_chunks(stored)]
    return b"".join(parts)
