"""Argument repairs at the edge of each tool: what was changed in a call's arguments so
it could run, said in words and returned on the result (`ToolResult.repairs`), so the
brain records every repair on the step.

A tool notes a value it read generously (`note("timezone 'London' read as
'Europe/London'")`), and only where the meaning is unambiguous; anything else stays a
failure that says what to write instead. Key synonyms (`expr` → `expression`) and near
tool names are repaired before the brain's schema gate, in the gateway, for every model
call (`tether_common.toolcalls.fit_call`), and travel on the call's own `repairs`.

The collector is a context variable set by the executor around each call, so the tool
signature `(args) -> str` stays as it is for tools that never repair.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_notes: ContextVar[list[str] | None] = ContextVar("tool_repairs", default=None)

MAX_REPAIRS = 50


def note(text: str) -> None:
    """Record one repair of the call being run (outside a call: nothing to record it on)."""
    notes = _notes.get()
    if notes is not None and len(notes) < MAX_REPAIRS:
        notes.append(text)


@contextmanager
def collecting() -> Iterator[list[str]]:
    """The repairs noted while the block runs (one call)."""
    notes: list[str] = []
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


__all__ = ["collecting", "note"]
