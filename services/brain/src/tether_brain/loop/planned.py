"""A call as the gates planned it (run, cached, refused, ask), and what follows from a
plan: the refusal a model reads, what is sent again after a takeover, which results
taint the run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from tether_brain.clients.approval import PendingApproval
from tether_brain.gates import Verdict
from tether_brain.hooks import HOOK_DENIED, HOOK_FAILED
from tether_brain.tools.results import refused
from tether_brain.tools.toolbox import NO_RUNNER, RUNNER_LOST, GateOutcome
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import (
    EFFECTS_UNAVAILABLE,
    TOOL_NOT_READY,
    ToolDescriptor,
    ToolResult,
)

# Answers to a call sent again that say nothing of what its first send did: nobody got
# this send, it was lost too, or the runner would not start it (its MCP server still
# connecting, or not known at all). For a non-idempotent call sent again after a
# takeover, such an answer leaves the first send's outcome unknown.
UNSETTLED = frozenset(
    {NO_RUNNER, RUNNER_LOST, "interrupted", EFFECTS_UNAVAILABLE, TOOL_NOT_READY, "unknown_tool"}
)


@dataclass(frozen=True, slots=True)
class Planned:
    call: CallRecord
    gate: GateOutcome
    verdict: Verdict | None = None
    cached: str | None = None
    # An operator's "run it again" on an in-doubt card: the runner may take over the
    # call's key although its first run left no outcome.
    retry_in_doubt: bool = False
    # Sent again after a takeover: its first send may have been lost with the replica, so
    # a runner that has just come back is waited for as after a lost reply.
    resent: bool = False
    # An approved staged effect: the digest of the change set the runner applies instead
    # of running the tool (`clients/staging.py`).
    staged: str | None = None
    # The operator's approval that let this call through, kept so that the gates, run
    # again for a re-send, are answered by it as they were (for this call's action only).
    approval: PendingApproval | None = None

    @property
    def decision(self) -> Literal["run", "cached", "refused", "ask"]:
        if self.cached is not None:
            return "cached"
        if not self.gate.allowed or self.verdict is None or self.verdict.decision == "deny":
            return "refused"
        return "ask" if self.verdict.decision == "ask" else "run"

    @property
    def tool(self) -> ToolDescriptor | None:
        return self.gate.tool

    @property
    def refused_by(self) -> str | None:
        """The gate that refused the call (`validation`, `budget`, `hook`, `permissions`), or
        None."""
        if self.decision != "refused":
            return None
        if not self.gate.allowed or self.verdict is None:
            return "validation"
        if self.verdict.code in (HOOK_DENIED, HOOK_FAILED):
            return "hook"
        return "budget" if self.verdict.code == "budget_exhausted" else "permissions"


def refusal(item: Planned) -> ToolResult:
    if not item.gate.allowed or item.verdict is None:
        return refused(item.call, item.gate.code or "refused", item.gate.message)
    return refused(item.call, item.verdict.code or "refused", item.verdict.reason)


def resends(planned: list[Planned]) -> list[Planned]:
    """What is sent again after a takeover: an idempotent call whatever the gates say now
    (a refusal is its result), a non-idempotent one only when they would still run it."""
    return [
        dataclasses.replace(item, resent=True)
        for item in planned
        if item.tool is None or item.tool.idempotent or item.decision in ("run", "cached")
    ]


def in_doubt_after_resend(tool: ToolDescriptor | None, result: ToolResult | None) -> bool:
    """A non-idempotent call whose outcome sending it again did not learn: not sent (the
    gates would not run it now), or answered with something that says nothing of its first
    send (the runner's `in_doubt`, no runner, the call lost again)."""
    if tool is None or tool.idempotent:
        return False
    return result is None or result.error_code in UNSETTLED


def taints(tool: ToolDescriptor) -> bool:
    """A result of `tool` may hold outside text: anything not declared trusted (a tool
    that declares nothing, or an older runner's, taints). `run_agent` is declared trusted
    because its child's own taint comes back with its summary (`subagents.py`)."""
    return tool.output_trust != "trusted"
