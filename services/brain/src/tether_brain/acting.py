"""The act half of a step: every call through the gates, identical calls from the cache,
non-idempotent calls journaled as intended before they run, results paired to call ids."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tether_brain.events import emit
from tether_brain.state import RunState, call_key
from tether_brain.toolbox import GateOutcome, Toolbox
from tether_common.errors import TetherError
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor, ToolResult


@dataclass(frozen=True, slots=True)
class Planned:
    call: CallRecord
    gate: GateOutcome
    cached: str | None = None

    @property
    def runs_tool(self) -> bool:
        return self.gate.allowed and self.cached is None


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


class Actor:
    def __init__(self, toolbox: Toolbox, *, max_calls_per_step: int) -> None:
        self.toolbox = toolbox
        self.max_calls_per_step = max_calls_per_step

    async def plan(self, state: RunState, calls: list[CallRecord]) -> list[Planned]:
        """Gates for each call, in order; budget counts every call that would run."""
        try:
            await self.toolbox.catalog()
        except TetherError as exc:
            gate = GateOutcome(False, exc.code, f"the tool catalogue is unavailable: {exc.message}")
            return [Planned(c, gate) for c in calls]
        planned = []
        for index, call in enumerate(calls):
            planned.append(self._plan_one(state, call, index))
        return planned

    def _plan_one(self, state: RunState, call: CallRecord, index: int) -> Planned:
        if index >= self.max_calls_per_step:
            limit = self.max_calls_per_step
            return Planned(
                call,
                GateOutcome(
                    False, "too_many_calls", f"not run: at most {limit} calls run per step."
                ),
            )
        gate = self.toolbox.validate(call, state.options)
        if not gate.allowed or gate.tool is None:
            return Planned(call, gate)
        cached = state.cache.get(call_key(gate.tool.name, call.arguments))
        if cached is not None:
            return Planned(call, gate, cached=cached)
        budget = state.limits.max_tool_calls
        if budget is not None and state.counters.tool_calls >= budget:
            return Planned(
                call,
                GateOutcome(
                    False, "budget_exhausted", f"the run's budget of {budget} tool calls is spent."
                ),
            )
        state.counters.tool_calls += 1
        return Planned(call, gate)

    async def run(self, state: RunState, planned: list[Planned]) -> list[ToolResult]:
        """Run what the gates allowed, concurrently; results keep the calls' order."""
        return list(await asyncio.gather(*(self._result(state, p) for p in planned)))

    async def _result(self, state: RunState, item: Planned) -> ToolResult:
        if item.cached is not None:
            emit(state, "guard", step=state.step, kind="repeated_call", name=item.call.name)
            return ToolResult(
                call_id=item.call.id, name=item.call.name, ok=True, content=item.cached
            )
        if not item.gate.allowed or item.gate.tool is None:
            return refused(item.call, item.gate.code or "refused", item.gate.message)
        try:
            return await self.toolbox.execute(state.run_id, item.call, item.gate.tool)
        except Exception as exc:  # a tool never crashes a step
            return refused(item.call, "tool_error", f"{type(exc).__name__}: {exc}")

    def descriptor(self, name: str) -> ToolDescriptor | None:
        return self.toolbox.descriptor(name)
