"""The act half of a step: every call through the gates (validation, then the permission
chain, then budget), identical calls from the cache, results paired to call ids, and the
run's taint raised by every result of a tool whose output is not declared trusted.

Every call goes to the runner with its idempotency key (`run_id:call_id`) and its run
tree's workspace folder. A call sent again (after a lost reply, or by the replica that
took the run over) is the same effect: the runner answers a non-idempotent call it has
already run with the recorded result, and `in_doubt` only when the outcome cannot be
known (the runner that ran it died before recording it)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from opentelemetry import trace

from tether_brain.agents.config import Agents
from tether_brain.gates import Verdict, decide
from tether_brain.loop.subagents import workspace_of
from tether_brain.persistence import trail
from tether_brain.state.events import emit
from tether_brain.state.run import RunState, call_key
from tether_brain.tools.results import interrupted, refused
from tether_brain.tools.toolbox import NO_RUNNER, RUNNER_LOST, GateOutcome, Toolbox
from tether_common.errors import TetherError
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import (
    EFFECTS_UNAVAILABLE,
    IN_DOUBT,
    ToolDescriptor,
    ToolResult,
)

tracer = trace.get_tracer(__name__)
log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
# Answers to a call sent again that say nothing of what its first send did: nobody got
# this send, it was lost too, or the runner would not start it. For a non-idempotent call
# sent again after a takeover, such an answer leaves the first send's outcome unknown.
UNSETTLED = frozenset({NO_RUNNER, RUNNER_LOST, "interrupted", EFFECTS_UNAVAILABLE, "unknown_tool"})
WAIT_POLL_S = 0.5  # between sends to a service nobody answers for, within the wait


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


class Actor:
    def __init__(
        self,
        toolbox: Toolbox,
        agents: Agents,
        *,
        max_calls_per_step: int,
        tree_of: Callable[[str], Awaitable[list[str]]] | None = None,
        service_wait_s: float = 30.0,
    ) -> None:
        self.service_wait_s = service_wait_s  # how long a call waits for a runner to listen
        self.toolbox = toolbox
        self.agents = agents
        self.max_calls_per_step = max_calls_per_step
        self.tree_of = tree_of  # a run's children, for who may read whose outputs

    async def plan(
        self, state: RunState, calls: list[CallRecord], *, approved: str | None = None
    ) -> list[Planned]:
        """Gates for each call, in order. `approved`: the call id an operator approved,
        whose `ask` is satisfied (a `deny` still denies)."""
        try:
            await self.toolbox.catalog()
        except TetherError as exc:
            gate = GateOutcome(False, exc.code, f"the tool catalogue is unavailable: {exc.message}")
            return [Planned(c, gate) for c in calls]
        planned = []
        for index, call in enumerate(calls):
            with tracer.start_as_current_span(f"gate {call.name}") as span:
                item = self._plan_one(state, call, index, approved)
                span.set_attribute("tether.gate.decision", item.decision)
                code = item.verdict.code if item.verdict else item.gate.code
                if code:
                    span.set_attribute("tether.gate.code", code)
            planned.append(item)
        return planned

    def _plan_one(
        self, state: RunState, call: CallRecord, index: int, approved: str | None
    ) -> Planned:
        if index >= self.max_calls_per_step:
            limit = self.max_calls_per_step
            gate = GateOutcome(
                False, "too_many_calls", f"not run: at most {limit} calls run per step."
            )
            return Planned(call, gate)
        gate = self.toolbox.validate(call, state.options)
        if not gate.allowed or gate.tool is None:
            state.audit_later(
                "gate.denied", trail.denial(call.name, gate.code or "refused", gate="validation")
            )
            return Planned(call, gate)
        verdict = self.verdict(state, gate.tool, call)
        state.audit_later("gate.decision", trail.decision(verdict, gate.tool.name, call.arguments))
        if verdict.decision == "ask" and approved == call.id:
            verdict = Verdict(
                "allow",
                None,
                "approved by an operator",
                verdict.reach,
                verdict.danger,
                verdict.grant,
                verdict.waived,
                verdict.trail,
            )
        if verdict.decision != "allow":
            return Planned(call, gate, verdict)
        cached = state.cache.get(call_key(gate.tool.name, call.arguments))
        if cached is not None:
            return Planned(call, gate, verdict, cached=cached)
        budget = state.limits.max_tool_calls
        if budget is not None and state.counters.tool_calls >= budget:
            state.audit_later(
                "gate.denied", trail.denial(gate.tool.name, "budget_exhausted", gate="budget")
            )
            spent = Verdict(
                "deny",
                "budget_exhausted",
                f"the run's budget of {budget} tool calls is spent.",
                verdict.reach,
            )
            return Planned(call, gate, spent)
        state.counters.tool_calls += 1
        return Planned(call, gate, verdict)

    def verdict(self, state: RunState, tool: ToolDescriptor, call: CallRecord) -> Verdict:
        policy = self.agents.policy(state.options.get("agent"), state.options)
        session = frozenset(state.options.get("session_grants", ()))
        return decide(tool, call.arguments, policy, tainted=state.counters.tainted, session=session)

    async def run(self, state: RunState, planned: list[Planned]) -> list[ToolResult]:
        """Run what the gates allowed, concurrently; results keep the calls' order."""
        return list(await asyncio.gather(*(self._result(state, p) for p in planned)))

    async def _result(self, state: RunState, item: Planned) -> ToolResult:
        match item.decision:
            case "cached":
                emit(state, "guard", step=state.step, kind="repeated_call", name=item.call.name)
                return ToolResult(
                    call_id=item.call.id, name=item.call.name, ok=True, content=item.cached or ""
                )
            case "refused":
                emit(
                    state,
                    "tool.denied",
                    step=state.step,
                    call_id=item.call.id,
                    name=item.call.name,
                    code=refusal(item).error_code,
                )
                return refusal(item)
            case "ask":
                return refused(
                    item.call,
                    "deferred",
                    "needs an operator's approval; another call of this step is waiting for one, ask again after it is decided.",
                )
            case "run":
                return await self._execute(state, item)

    async def _execute(self, state: RunState, item: Planned) -> ToolResult:
        assert item.tool is not None
        local = self.toolbox.local.get(item.tool.name)
        state.audit_later(
            "tool.call", trail.tool_call(item.call.id, item.tool.name, item.call.arguments)
        )
        try:
            if local is not None:
                result = await local.run(state, item.call)
            else:
                result = await self._remote(state, item)
        except Exception as exc:  # a tool never crashes a step
            result = refused(item.call, "tool_error", f"{type(exc).__name__}: {exc}")
        state.audit_later("tool.result", trail.tool_result(result))
        # Failures too: a failed command or a server's error message can quote what it read.
        if taints(item.tool):
            state.counters.tainted = True
        return result

    async def _remote(self, state: RunState, item: Planned) -> ToolResult:
        """Send the call to the runner. With no reply (the runner died mid-call, or the
        reply was lost) the call is sent again, at most 3 times in all: an idempotent one
        through every gate again; any other with the same key, which the runner never runs
        twice (it answers the recorded outcome, waits for a run still going, or says the
        outcome is in doubt, reported as interrupted)."""
        assert item.tool is not None
        tree = await self.run_tree(state) if item.tool.name == "retrieve_output" else []
        lost = item.resent
        for attempt in range(1, MAX_ATTEMPTS + 1):
            result = await self._delivered(state, item, tree, after_loss=lost)
            if result.error_code == IN_DOUBT:
                return refused(item.call, "interrupted", _after_colon(result.content))
            # A runner restarted after a loss may not know its MCP tools yet.
            recovering = lost and result.error_code == "unknown_tool"
            if result.error_code != RUNNER_LOST and not recovering:
                if lost and not item.tool.idempotent and result.error_code in UNSETTLED:
                    break  # this send did not run, which says nothing of the lost one
                return result
            lost = True
            if attempt == MAX_ATTEMPTS:
                break
            await asyncio.sleep(1.0 * attempt)
            if item.tool.idempotent:
                again = self._plan_one(state, item.call, 0, None)
                if again.decision != "run":
                    return refusal(again)
        return result if item.tool.idempotent else interrupted(item.call)

    async def _delivered(
        self, state: RunState, item: Planned, tree: list[str], *, after_loss: bool
    ) -> ToolResult:
        """One send of the call, repeated while no runner listens (a restart), for at most
        `service_wait_s`: a call nobody received has not run, so sending it again is safe
        whatever the tool. A runner that has just come back may not know its MCP tools
        yet (`unknown_tool`: not run either), so that is waited out too. The run says
        once that it waits. Still undelivered after the wait, the result says the call
        did not run (never "outcome unknown")."""
        assert item.tool is not None
        deadline = time.monotonic() + self.service_wait_s
        told = False
        while True:
            result = await self.toolbox.execute(
                state.run_id,
                item.call,
                item.tool,
                tree,
                workspace=workspace_of(state),
                retry_in_doubt=item.retry_in_doubt,
            )
            restarting = result.error_code == NO_RUNNER or (
                result.error_code == "unknown_tool" and (told or after_loss)
            )
            if not restarting or time.monotonic() >= deadline:
                return result
            if not told:
                told = True
                log.info("run %s waits for a runner (up to %ss)", state.run_id, self.service_wait_s)
                emit(
                    state,
                    "guard",
                    step=state.step,
                    kind="waiting",
                    service="tools-runner",
                    call_id=item.call.id,
                    wait_s=self.service_wait_s,
                )
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

    async def run_tree(self, state: RunState) -> list[str]:
        """The runs whose outputs this run may read: its parent and its children."""
        tree = [] if state.parent_id is None else [state.parent_id]
        return tree + (await self.tree_of(state.run_id) if self.tree_of else [])

    def descriptor(self, name: str) -> ToolDescriptor | None:
        return self.toolbox.descriptor(name)


def _after_colon(content: str) -> str:
    """The runner's explanation of a failure, without its `FAILED: code:` head."""
    return content.split(": ", 2)[-1] if content.startswith("FAILED: ") else content
