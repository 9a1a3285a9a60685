"""A step that calls tools: the calls journaled, planned through the gates, run (what
the gates allow), their results recorded; a call waiting for an operator parks the run,
`run_agent` calls start helpers and park it until they end. A step whose calls name no
usable tool gets one corrective note."""

from __future__ import annotations

from opentelemetry import trace

from tether_brain.clients.model import ModelTurn
from tether_brain.context import rules
from tether_brain.loop.acting import Actor
from tether_brain.loop.answers import describe_calls
from tether_brain.loop.completion import Completion
from tether_brain.loop.outcome import Outcome
from tether_brain.loop.parking import Parking
from tether_brain.loop.planned import Planned
from tether_brain.loop.recording import record_result
from tether_brain.loop.subagents import Children
from tether_brain.state.events import emit
from tether_brain.state.run import RunState, add_usage
from tether_brain.tools.helpers import RUN_AGENT
from tether_brain.tools.toolbox import GateOutcome
from tether_common.messages.events import AgentEnd, AgentStart, Guard, Step, ToolCall
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.runs import StepView

tracer = trace.get_tracer(__name__)


class Calls:
    def __init__(
        self, actor: Actor, parking: Parking, children: Children, completion: Completion
    ) -> None:
        self.actor = actor
        self.parking = parking
        self.children = children
        self.completion = completion

    def usable(self, state: RunState, turn: ModelTurn) -> bool:
        """At least one call names a tool this replica knows, or one of an MCP server
        still connecting (the call waits for it to load, then meets the gates)."""
        return any(
            self.actor.descriptor(c.name) is not None
            or self.actor.toolbox.loading(c.name, state.options) is not None
            for c in turn.calls
        )

    async def correct(self, state: RunState, turn: ModelTurn) -> Outcome:
        """The first step whose calls name no usable tool: say which tools there are."""
        state.counters.corrections += 1
        state.counters.low_effort = False
        emit(
            state,
            Guard(step=state.step, kind="unusable_call", names=[c.name for c in turn.calls]),
        )
        state.add_message(
            ChatMessage(role="assistant", content=turn.text.strip() or "(unusable tool call)")
        )
        state.add_message(
            ChatMessage(role="user", content=rules.corrective(self.actor.toolbox.names()))
        )
        await self.completion.commit(state)
        return Outcome.GO_ON

    async def act(self, state: RunState, turn: ModelTurn) -> Outcome:
        """Run the step's calls; `PARKED` when the run waits for an operator or helpers."""
        calls = turn.calls
        text = turn.text.strip()
        state.add_message(ChatMessage(role="assistant", content=text, tool_calls=calls))
        described = describe_calls(text, calls)
        state.add_step(StepView(step=state.step, kind="model", text=described))
        emit(state, Step(step=state.step, kind="model", text=described))
        for call in calls:
            emit(
                state,
                ToolCall(
                    step=state.step, call_id=call.id, name=call.name, arguments=call.arguments
                ),
            )
        planned = await self.actor.plan(state, calls)
        asking = next((p for p in planned if p.decision == "ask"), None)
        helpers = [
            p for p in planned if p.decision == "run" and p.tool and p.tool.name == RUN_AGENT
        ]
        if (
            asking is not None
            or helpers
            or any(p.decision == "run" and p.tool and not p.tool.idempotent for p in planned)
        ):
            await self.completion.commit(state)  # intent is durable before anything irreversible
        runnable = [p for p in planned if p not in helpers or asking is not None]
        results = await self.actor.run(state, runnable)
        for item, result in zip(runnable, results, strict=True):
            if item is not asking:
                record_result(state, item, result)
        state.counters.low_effort = all(r.ok for r in results)
        if asking is not None and await self.parking.park(state, asking) is Outcome.PARKED:
            await self.completion.commit(state)
            return Outcome.PARKED
        if helpers and asking is None:
            return await self._start_helpers(state, [p.call for p in helpers])
        await self.completion.commit(state)
        return Outcome.GO_ON

    async def collect_helpers(self, state: RunState) -> None:
        """Resume a parent: each child's summary becomes its run_agent call's result."""
        for outcome in await self.children.collect(state):
            record_result(state, Planned(outcome.call, GateOutcome(True)), outcome.result)
            emit(
                state,
                AgentEnd(
                    step=state.step,
                    call_id=outcome.call.id,
                    child_run_id=outcome.child_id,
                    ok=outcome.result.ok,
                ),
            )
            state.usage = add_usage(state.usage, outcome.usage)
            state.counters.tool_calls += outcome.tool_calls
        state.counters.pending_children = None
        state.counters.low_effort = False
        await self.completion.commit(state)

    async def _start_helpers(self, state: RunState, calls: list[CallRecord]) -> Outcome:
        """Start one child run per run_agent call and park: the parent holds nothing until
        every child has ended (a notice, or the maintenance sweep, resumes it)."""
        tools = [t.name for t in await self.actor.toolbox.offered(state.options)]
        with tracer.start_as_current_span("run_agent") as span:  # children's runs nest here
            started = await self.children.start(state, calls, tools)
            span.set_attribute("tether.children", len(started))
        for call in calls:
            emit(
                state,
                AgentStart(
                    step=state.step,
                    call_id=call.id,
                    child_run_id=started[call.id],
                    task=call.arguments.get("task"),
                ),
            )
        state.status = "awaiting_agents"
        state.counters.pending_children = started
        await self.completion.commit(state)
        return Outcome.PARKED
