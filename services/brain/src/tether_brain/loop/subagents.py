"""Sub-agents: `run_agent {"task", "tools"?, "max_steps"?}` starts a child run with no
history, a helper directive, its own budget leased from the parent, and only the tools it
asked for that the parent may use. The parent parks (`awaiting_agents`, holding nothing)
and resumes with each child's summary once all have ended. Depth: main 0, child 1,
grandchild 2, which is offered no `run_agent`.

Taint follows the data both ways: a child of a run that has read untrusted content starts
tainted (its task may carry that content), and a child that became tainted taints its
parent when its summary comes back (the summary may carry what it read).

Owns starting the helpers of a step (the parent then parks) and turning each ended
child's summary into its call's result; the step commits both."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from opentelemetry import trace

from tether_brain.loop.outcome import Outcome
from tether_brain.loop.planned import Planned
from tether_brain.loop.recording import record_result
from tether_brain.persistence.store import StorePort
from tether_brain.state.events import emit
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Counters, Limits, RunState, add_usage
from tether_brain.tools.helpers import DEFAULT_CHILD_STEPS, MAX_CHILD_STEPS, MAX_DEPTH, RUN_AGENT
from tether_brain.tools.results import refused
from tether_brain.tools.toolbox import GateOutcome, Toolbox
from tether_common.errors import NotFoundError
from tether_common.messages.events import AgentEnd, AgentStart
from tether_common.messages.gateway import CallRecord
from tether_common.messages.runs import Usage
from tether_common.messages.tools import ToolResult
from tether_common.traces import traceparent

Launch = Callable[[RunState], Awaitable[None]]
tracer = trace.get_tracer(__name__)


def workspace_of(state: RunState) -> str:
    """The run tree's workspace folder on the runner: the root run's id, which its
    sub-agents inherit, so a helper sees (and changes) the files of the run that started it."""
    return str(state.options.workspace or state.run_id)


def _share(total: float | None, spent: float, parts: int) -> float | None:
    return None if total is None else max(total - spent, 0.0) / parts


def child_limits(parent: RunState, asked_steps: int | None, siblings: int) -> Limits:
    """The child's budget, leased from what the parent has left, split between siblings."""
    limits, usage = parent.limits, parent.usage
    calls = _share(limits.max_tool_calls, parent.counters.tool_calls, siblings)
    tokens = _share(limits.max_tokens, usage.input_tokens + usage.output_tokens, siblings)
    return Limits(
        max_steps=min(asked_steps or DEFAULT_CHILD_STEPS, MAX_CHILD_STEPS),
        max_tool_calls=None if calls is None else int(calls),
        max_cost=_share(limits.max_cost, usage.cost, siblings),
        max_tokens=None if tokens is None else max(int(tokens), 1),
        max_seconds=_share(limits.max_seconds, parent.active_seconds, 1),
    )


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    call: CallRecord
    child_id: str
    result: ToolResult
    usage: Usage
    tool_calls: int


class Children:
    def __init__(self, store: StorePort, launch: Launch, toolbox: Toolbox) -> None:
        self.store = store
        self.launch = launch  # the run manager's: it owns the tasks that advance runs
        self.toolbox = toolbox  # what the parent may use, of which a child asks some

    async def start_helpers(self, parent: RunState, calls: list[CallRecord]) -> Outcome:
        """Start one child run per run_agent call; `PARKED`: the parent holds nothing
        until every child has ended (a notice, or the maintenance sweep, resumes it)."""
        tools = [t.name for t in await self.toolbox.offered(parent.options)]
        with tracer.start_as_current_span("run_agent") as span:  # children's runs nest here
            started = await self._launched(parent, calls, tools)
            span.set_attribute("tether.children", len(started))
        for call in calls:
            emit(
                parent,
                AgentStart(
                    step=parent.step,
                    call_id=call.id,
                    child_run_id=started[call.id],
                    task=call.arguments.get("task"),
                ),
            )
        parent.status = "awaiting_agents"
        parent.counters.pending_children = started
        return Outcome.PARKED

    async def collect_summaries(self, parent: RunState) -> None:
        """Resume a parent: each child's summary becomes its run_agent call's result."""
        for outcome in await self._outcomes(parent):
            record_result(parent, Planned(outcome.call, GateOutcome(True)), outcome.result)
            emit(
                parent,
                AgentEnd(
                    step=parent.step,
                    call_id=outcome.call.id,
                    child_run_id=outcome.child_id,
                    ok=outcome.result.ok,
                ),
            )
            parent.usage = add_usage(parent.usage, outcome.usage)
            parent.counters.tool_calls += outcome.tool_calls
        parent.counters.pending_children = None
        parent.counters.low_effort = False

    async def _launched(
        self, parent: RunState, calls: list[CallRecord], parent_tools: list[str]
    ) -> dict[str, str]:
        """Create and start one child per call; returns call id → child run id."""
        started: dict[str, str] = {}
        for call in calls:
            child = self._child(parent, call, parent_tools, len(calls))
            await self.launch(child)
            started[call.id] = child.run_id
        return started

    def _child(
        self, parent: RunState, call: CallRecord, parent_tools: list[str], siblings: int
    ) -> RunState:
        asked = call.arguments.get("tools")
        allowed = [t for t in parent_tools if asked is None or t in asked]
        depth = parent.depth + 1
        if depth >= MAX_DEPTH:
            allowed = [t for t in allowed if t != RUN_AGENT]
        options = RunOptions(
            **parent.options.inherited(),
            allowed_tools=tuple(allowed),
            helper=True,
            depth=depth,
            workspace=workspace_of(parent),
        )
        now = datetime.now(UTC)
        return RunState(
            run_id=f"run_{uuid.uuid4().hex}",
            prompt=str(call.arguments["task"]),
            provider=parent.provider,
            model=parent.model,
            limits=child_limits(parent, call.arguments.get("max_steps"), siblings),
            created_at=now,
            updated_at=now,
            options=options,
            fence=1,
            parent_id=parent.run_id,
            depth=depth,
            tenant=parent.tenant,
            owner=parent.owner,
            counters=Counters(tainted=parent.counters.tainted),
            # Made inside the parent's `run_agent` span: the child's trace hangs from it.
            trace_parent=traceparent(),
        )

    async def _outcomes(self, parent: RunState) -> list[ChildOutcome]:
        """Each child's final summary and status, as the result of its run_agent call; a
        tainted child taints `parent` (committed with the summaries)."""
        outcomes = []
        pending = parent.counters.pending_children or {}
        # In the order the calls were made (the stored mapping is JSONB: its order is not).
        order = [c.id for m in parent.messages for c in m.tool_calls if c.id in pending]
        for call_id in order:
            child_id = pending[call_id]
            call = parent.call_by_id(call_id)
            if call is None:
                continue
            try:
                child = await self.store.load(child_id)
            except NotFoundError:
                outcomes.append(
                    ChildOutcome(
                        call,
                        child_id,
                        refused(call, "agent_lost", "the helper run is gone"),
                        Usage(),
                        0,
                    )
                )
                continue
            if child.counters.tainted:
                parent.counters.tainted = True
            outcomes.append(
                ChildOutcome(
                    call, child_id, _summary(call, child), child.usage, child.counters.tool_calls
                )
            )
        return outcomes


def _summary(call: CallRecord, child: RunState) -> ToolResult:
    answer = child.answer or "(no answer)"
    if child.status == "completed":
        return ToolResult(call_id=call.id, name=RUN_AGENT, ok=True, content=answer)
    reason = f" ({child.stop_reason})" if child.stop_reason else ""
    return refused(
        call, f"agent_{child.status}", f"the helper ended {child.status}{reason}: {answer}"
    )
