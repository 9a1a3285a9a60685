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
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable

from opentelemetry import trace

from tether_brain.agents.config import Agents
from tether_brain.clients.approval import PendingApproval, action_digest
from tether_brain.gates import Verdict, decide
from tether_brain.hooks import Hooks
from tether_brain.loop.planned import Planned, refusal, taints
from tether_brain.loop.sending import WAIT_POLL_S, Sender, mcp_server, say_waiting
from tether_brain.persistence import trail
from tether_brain.state.events import emit
from tether_brain.state.run import RunState, call_key
from tether_brain.tools.results import refused
from tether_brain.tools.toolbox import GateOutcome, Toolbox
from tether_common.errors import TetherError
from tether_common.messages.events import Guard, ToolDenied
from tether_common.messages.gateway import CallRecord
from tether_common.messages.tools import ToolDescriptor, ToolResult
from tether_common.metrics import denials

tracer = trace.get_tracer(__name__)


class Actor:
    def __init__(
        self,
        toolbox: Toolbox,
        agents: Agents,
        *,
        max_calls_per_step: int,
        tree_of: Callable[[str], Awaitable[list[str]]] | None = None,
        service_wait_s: float = 30.0,
        hooks: Hooks | None = None,
    ) -> None:
        self.hooks = hooks  # the tenants' lifecycle hooks (hooks/); None: none
        self.service_wait_s = service_wait_s  # how long a call waits for a runner to listen
        self.toolbox = toolbox
        self.agents = agents
        self.max_calls_per_step = max_calls_per_step
        self.tree_of = tree_of  # a run's children, for who may read whose outputs
        # A call sent again passes every gate again, with the approval it ran under:
        # without it, the gate that approval answered would refuse the approved call.
        self.sender = Sender(
            toolbox,
            lambda state, item: self._plan_one(state, item.call, 0, item.approval),
            service_wait_s=service_wait_s,
        )

    async def plan(
        self, state: RunState, calls: list[CallRecord], *, approved: PendingApproval | None = None
    ) -> list[Planned]:
        """Gates for each call, in order. `approved`: an operator's allow, which answers
        the asks it was requested for, for its own call and sealed action only
        (`PendingApproval.unanswered`); a `deny` still denies."""
        try:
            await self.toolbox.catalog()
        except TetherError as exc:
            gate = GateOutcome(False, exc.code, f"the tool catalogue is unavailable: {exc.message}")
            return [Planned(c, gate) for c in calls]
        await self._await_loading(state, calls[: self.max_calls_per_step])
        planned = []
        for index, call in enumerate(calls):
            with tracer.start_as_current_span(f"gate {call.name}") as span:
                item = await self._plan_hooked(state, call, index, approved)
                span.set_attribute("tether.gate.decision", item.decision)
                code = item.verdict.code if item.verdict else item.gate.code
                if code:
                    span.set_attribute("tether.gate.code", code)
                if (refused_by := item.refused_by) is not None:
                    denials.add(1, {"gate": refused_by, "code": code or "refused"})
            planned.append(item)
        return planned

    async def _await_loading(self, state: RunState, calls: list[CallRecord]) -> None:
        """Calls of tools the catalogue does not hold yet because their MCP server is
        still connecting (a restarted runner; a replica that never saw the server up)
        wait for the server to list them, re-reading the catalogue, for at most
        `service_wait_s`; the gates then judge each on its descriptor. Still not loaded
        after the wait, the validation gate refuses it `tool_not_ready`. Only a server the
        runner names as connecting is waited for, so a made-up name is refused at once."""
        deadline = time.monotonic() + self.service_wait_s
        told: set[str] = set()
        while True:
            waiting: dict[str, str] = {}  # server → the first call waiting for it
            for call in calls:
                if (server := self.toolbox.loading(call.name, state.options)) is not None:
                    waiting.setdefault(server, call.id)
            if not waiting or time.monotonic() >= deadline:
                return
            for server, call_id in waiting.items():
                if server not in told:
                    told.add(server)
                    say_waiting(state, mcp_server(server), self.service_wait_s, call_id=call_id)
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
            with contextlib.suppress(TetherError):  # a failed refresh keeps the last one
                await self.toolbox.catalog(fresh=True)

    async def _plan_hooked(
        self, state: RunState, call: CallRecord, index: int, approved: PendingApproval | None
    ) -> Planned:
        """`_plan_one`, with the tenant's `before_tool` hooks asked first about a call the
        gates would not refuse as it stands. A denied call is refused with the hook's
        reason; a rewritten one is gated again from the start (every gate, the approval
        too), the original's verdict audited beside it, so a rewrite never widens."""
        if self.hooks is None or index >= self.max_calls_per_step:
            return self._plan_one(state, call, index, approved)
        gate = self.toolbox.validate(call, state.options)
        if not gate.allowed or gate.tool is None:
            return self._plan_one(state, call, index, approved)
        first = self.verdict(state, gate.tool, call)
        if first.decision == "deny":
            return self._plan_one(state, call, index, approved)
        judged = await self.hooks.before_tool(state, call)
        if judged.action == "deny":
            state.audit_later(
                "gate.decision", trail.decision(first, gate.tool.name, call.arguments)
            )
            denied = Verdict("deny", judged.code, judged.reason or "refused", first.reach)
            return Planned(call, gate, denied)
        if judged.action == "rewrite" and judged.call is not None:
            state.audit_later(
                "gate.decision", trail.decision(first, gate.tool.name, call.arguments)
            )
            self.hooks.rewrote(state, call, judged)
            return self._plan_one(state, judged.call, index, approved)
        return self._plan_one(state, call, index, approved)

    def _plan_one(
        self, state: RunState, call: CallRecord, index: int, approved: PendingApproval | None
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
        if verdict.decision == "ask" and approved is not None and approved.call_id == call.id:
            verdict = _approved(verdict, approved, state, call, gate.tool)
        else:
            approved = None  # not what let this call through: a re-send must not carry it
        if verdict.decision != "allow":
            return Planned(call, gate, verdict)
        cached = state.cache.get(call_key(gate.tool.name, call.arguments))
        if cached is not None:
            return Planned(call, gate, verdict, cached=cached, approval=approved)
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
        return Planned(call, gate, verdict, approval=approved)

    def verdict(self, state: RunState, tool: ToolDescriptor, call: CallRecord) -> Verdict:
        """The permission chain's verdict on `call` as the run stands (no approval)."""
        policy = self.agents.policy(state.options, state.tenant)
        session = frozenset((*state.options.session_grants, *state.counters.chat_grants))
        return decide(tool, call.arguments, policy, tainted=state.counters.tainted, session=session)

    async def execute(self, state: RunState, planned: list[Planned]) -> list[ToolResult]:
        """Run what the gates allowed, concurrently; results keep the calls' order."""
        return list(await asyncio.gather(*(self._result(state, p) for p in planned)))

    async def _result(self, state: RunState, item: Planned) -> ToolResult:
        match item.decision:
            case "cached":
                emit(state, Guard(step=state.step, kind="repeated_call", name=item.call.name))
                return ToolResult(
                    call_id=item.call.id, name=item.call.name, ok=True, content=item.cached or ""
                )
            case "refused":
                emit(
                    state,
                    ToolDenied(
                        step=state.step,
                        call_id=item.call.id,
                        name=item.call.name,
                        code=refusal(item).error_code,
                    ),
                )
                return refusal(item)
            case "ask":
                return refused(
                    item.call,
                    "deferred",
                    "needs an operator's approval; another call of this step is waiting for one, ask again after it is decided.",
                )
            case "run":
                return await self._call_tool(state, item)

    async def _call_tool(self, state: RunState, item: Planned) -> ToolResult:
        assert item.tool is not None
        local = self.toolbox.local.get(item.tool.name)
        state.audit_later(
            "tool.call", trail.tool_call(item.call.id, item.tool.name, item.call.arguments)
        )
        try:
            if local is not None:
                result = await local.run(state, item.call)
            else:
                tree = await self.run_tree(state) if item.tool.name == "retrieve_output" else []
                result = await self.sender.send(state, item, tree)
        except Exception as exc:  # a tool never crashes a step
            result = refused(item.call, "tool_error", f"{type(exc).__name__}: {exc}")
        if self.hooks is not None:  # what the model, the events and the audit see of it
            result = await self.hooks.after_tool(state, item.call, result)
        state.audit_later("tool.result", trail.tool_result(result))
        # Failures too: a failed command or a server's error message can quote what it read.
        if taints(item.tool):
            state.counters.tainted = True
        return result

    async def run_tree(self, state: RunState) -> list[str]:
        """The runs whose outputs this run may read: its parent and its children."""
        tree = [] if state.parent_id is None else [state.parent_id]
        return tree + (await self.tree_of(state.run_id) if self.tree_of else [])

    def descriptor(self, name: str) -> ToolDescriptor | None:
        return self.toolbox.descriptor(name)


def _approved(
    verdict: Verdict,
    approval: PendingApproval,
    state: RunState,
    call: CallRecord,
    tool: ToolDescriptor,
) -> Verdict:
    """The gates' ask answered by an operator's approval: allowed when the approval is for
    this call's sealed action and answers every gate that asks; else refused
    `approval_stale` (the operator approved something else)."""
    digest = action_digest(state, call, tool, approval.step, approval.staged)
    problem = approval.unanswered(call, verdict, digest)
    if problem is not None:
        return Verdict("deny", "approval_stale", problem, verdict.reach, verdict.danger)
    return dataclasses.replace(
        verdict,
        decision="allow",
        code=None,
        reason="approved by an operator",
        quorum=None,
        asks=(),
    )
