"""`grep` over a stored output: a regular expression (RE2, linear time, checked by
`tether_common.patterns`) with context lines, run in a child process under a time budget
and a cap on how many run at once, so neither a pattern nor a burst of them can hang the
service."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import aclosing, suppress
from typing import Any

from tether_common.errors import MessageError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_common.patterns import PatternProblem, compile_pattern
from tether_output_store.pages import page_of
from tether_output_store.store import OutputStore, StoredOutput


def check_pattern(pattern: str | None, ignore_case: bool) -> str:
    """Refuse a pattern here, with the reason, before a worker is started for it."""
    if not pattern:
        raise MessageError('mode "grep" needs a "pattern"', code="invalid_message")
    compiled = compile_pattern(pattern, ignore_case=ignore_case)
    if isinstance(compiled, PatternProblem):
        raise MessageError(compiled.message, code=compiled.code)
    return pattern


async def feed(proc: asyncio.subprocess.Process, store: OutputStore, stored: StoredOutput) -> None:
    assert proc.stdin is not None
    try:
        async with aclosing(store.iter_chunks(stored)) as pieces:
            async for piece in pieces:
                proc.stdin.write(piece)
                await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker died or was killed; the reader reports it


async def collect(proc: asyncio.subprocess.Process, records: list[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        records.append(json.loads(line))


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
    async with slots:
        records, timed_out = await _search(store, stored, spec, budget_s)
    return grep_page(stored, query, records, timed_out, budget_s)


async def _search(
    store: OutputStore, stored: StoredOutput, spec: dict[str, Any], budget_s: float
) -> tuple[list[dict[str, Any]], bool]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether_output_store.grep_worker", json.dumps(spec),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    records: list[dict[str, Any]] = []
    timed_out = False
    try:
        async with asyncio.timeout(budget_s), asyncio.TaskGroup() as group:
            group.create_task(feed(proc, store, stored))
            group.create_task(collect(proc, records))
    except TimeoutError:
        timed_out = True
    finally:
        with suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    return records, timed_out


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
