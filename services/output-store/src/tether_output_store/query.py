"""Answers a `QueryOutput`: checks who may read the ref, then pages or queries it."""

from __future__ import annotations

import asyncio
import csv
import io
from dataclasses import dataclass, field
from typing import Any, assert_never

from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_output_store.grep import run_grep
from tether_output_store.jsonpath import compile_path
from tether_output_store.pages import bytes_page, check_size, lines_page, page_of, whole
from tether_output_store.store import OutputStore, StoredOutput
from tether_output_store.workers import run_worker


@dataclass(frozen=True, slots=True)
class QueryLimits:
    budget_s: float  # the time a `grep` or `json` worker may take
    parse_cap: int  # largest output that `json` and `csv` queries parse whole
    # At most this many workers at once; more queries wait their turn.
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(4))


def cut(text: str, max_bytes: int) -> tuple[str, str | None]:
    data = text.encode()
    if len(data) <= max_bytes:
        return text, None
    kept = data[:max_bytes].decode(errors="ignore")
    return kept, f"cut at {max_bytes} of {len(data)} bytes; select a narrower path."


def worker_memory(parse_cap: int) -> int:
    """The address space a JSON worker may use: the interpreter, and about 24 bytes of
    objects for each byte of the largest document it may be given."""
    return 512 * 1024 * 1024 + 24 * parse_cap


async def json_page(
    store: OutputStore, stored: StoredOutput, query: QueryOutput, limits: QueryLimits
) -> OutputPage:
    if not query.path:
        raise MessageError(
            'mode "json" needs a "path", e.g. "$.items[0]"', code=ErrorCode.INVALID_MESSAGE
        )
    compile_path(query.path)  # a bad path is refused here, before a worker starts
    check_size(stored, limits.parse_cap, query.mode)
    spec = {
        "path": query.path,
        "max_bytes": query.max_bytes,
        "memory_bytes": worker_memory(limits.parse_cap),
    }
    done = await run_worker(
        "tether_output_store.json_worker",
        spec,
        store,
        stored,
        budget_s=limits.budget_s,
        slots=limits.slots,
    )
    if done.timed_out or not done.records:
        raise MessageError(
            f"JSON path {query.path!r} did not finish within {limits.budget_s:g}s; "
            "use a narrower path (fewer '..' and filters)",
            code=ErrorCode.TOO_LARGE,
        )
    record = done.records[0]
    if "error" in record:
        raise MessageError(str(record["message"]), code=str(record["error"]))
    text, note = cut(str(record["text"]), query.max_bytes)
    return page_of(stored, query, text, note=note or record.get("note"))


def pick_columns(header: list[str], wanted: list[str]) -> list[int]:
    picked = []
    for name in wanted:
        if name in header:
            picked.append(header.index(name))
        elif name.isdigit() and int(name) < len(header):
            picked.append(int(name))
        else:
            raise MessageError(
                f"no column {name!r}; columns: {', '.join(header[:50])}",
                code=ErrorCode.INVALID_COLUMN,
            )
    return picked


def csv_rows(text: str, media_type: str) -> list[list[str]]:
    first = text.split("\n", 1)[0]
    tab = "tab-separated" in media_type or first.count("\t") > first.count(",")
    return list(csv.reader(io.StringIO(text), delimiter="\t" if tab else ","))


async def csv_page(
    store: OutputStore, stored: StoredOutput, query: QueryOutput, cap: int
) -> OutputPage:
    raw = await whole(store, stored, cap, query.mode)
    rows = csv_rows(raw.decode(errors="replace"), stored.media_type)
    if not rows:
        return page_of(stored, query, "", note="empty CSV.")
    header, body = rows[0], rows[1:]
    picked = pick_columns(header, query.columns) if query.columns else list(range(len(header)))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([header[i] for i in picked])
    shown = body[query.offset : query.offset + query.limit]
    for row in shown:
        writer.writerow([row[i] if i < len(row) else "" for i in picked])
    text, note = cut(out.getvalue(), query.max_bytes)
    following = query.offset + len(shown)
    extra: dict[str, Any] = {"next_offset": following if following < len(body) else None}
    return page_of(stored, query, text, note=note or f"{len(body)} data rows in all.", **extra)


async def answer(store: OutputStore, query: QueryOutput, limits: QueryLimits) -> OutputPage:
    stored = await store.describe(query.ref, {query.run_id, *query.allowed_runs})
    match query.mode:
        case "lines":
            return await lines_page(store, stored, query)
        case "bytes":
            return await bytes_page(store, stored, query)
        case "grep":
            return await run_grep(store, stored, query, limits.budget_s, limits.slots)
        case "json":
            return await json_page(store, stored, query, limits)
        case "csv":
            return await csv_page(store, stored, query, limits.parse_cap)
        case _:
            assert_never(query.mode)
