"""Tool results the brain writes itself: refusals and interruptions (never raised)."""

from __future__ import annotations

from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolResult


def refused(call: CallRecord, code: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        name=call.name,
        ok=False,
        content=f"FAILED: {code}: {message}",
        error_code=code,
    )


def interrupted(call: CallRecord) -> ToolResult:
    return refused(
        call,
        "interrupted",
        "the brain stopped while this call ran, so its outcome is unknown; it was not run "
        "again because it is not idempotent. Check its effect before repeating it.",
    )


def not_run(call: CallRecord) -> ToolResult:
    return refused(call, "stopped", "not run: the run was stopped before this call could run.")
