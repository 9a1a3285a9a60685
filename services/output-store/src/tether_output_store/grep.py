"""`grep` over a stored output: a regular expression (RE2, linear time, checked by
`tether_common.patterns`) with context lines, run in a worker process (`workers.py`)
under a time budget and a cap on how many run at once, so neither a pattern nor a burst
of them can hang the service."""

from __future__ import annotations

import asyncio
from typing import Any

from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_common.patterns import PatternProblem, compile_pattern
from tether_output_store.pages import page_of
from tether_output_store.store import OutputStore, StoredOutput
from tether_output_store.workers import run_worker


def check_pattern(pattern: str | None, ignore_case: bool) -> str:
    """Refuse a pattern here, with the reason, before a worker is started for it."""
    if not pattern:
        raise MessageError('mode "grep" needs a "pattern"', code=ErrorCode.INVALID_MESSAGE)
    compiled = compile_pattern(pattern, ignore_case=ignore_case)
    if isinstance(compiled, PatternProblem):
        raise MessageError(compiled.message, code=compiled.code)
    return pattern


def render(records: list[dict[str, Any]]) -> str:
    shown, previous = [], 0
    for record in records:
        if "n" not in record:
            continue
        if previous and record["n"] > previous + 1:
            shown.append("--")
        shown.append(f"{record['n']}{':' if record['hit'] else '-'}{record['text']}")
        previous = record["n"]
    return "\n".join(shown) + ("\n" if shown else "")


async def run_grep(
    store: OutputStore,
    stored: StoredOutput,
    query: QueryOutput,
    budget_s: float,
    slots: asyncio.Semaphore,
) -> OutputPage:
    spec = {
        "pattern": check_pattern(query.pattern, query.ignore_case),
        "ignore_case": query.ignore_case,
        "context": query.context,
        "skip": query.offset,
        "limit": query.limit,
    }
    done = await run_worker(
        "tether_output_store.grep_worker", spec, store, stored, budget_s=budget_s, slots=slots
    )
    return grep_page(stored, query, done.records, done.timed_out, budget_s)


def grep_page(
    stored: StoredOutput,
    query: QueryOutput,
    records: list[dict[str, Any]],
    timed_out: bool,
    budget_s: float,
) -> OutputPage:
    total = next((r["total"] for r in records if "total" in r), None)
    text = render(records)
    note = None
    if len(text.encode()) > query.max_bytes:
        text = text.encode()[: query.max_bytes].decode(errors="ignore")
        text = text[: text.rfind("\n") + 1]
        note = f"cut at {query.max_bytes} bytes; narrow the pattern or lower limit."
    if timed_out:
        note = f"search stopped after its {budget_s:g}s budget; matches shown are partial."
    following = query.offset + query.limit
    more = total is not None and total > following
    return page_of(
        stored,
        query,
        text,
        matches=total,
        next_offset=following if more else None,
        note=note or (f"{total} matching lines in all." if total is not None else None),
    )
