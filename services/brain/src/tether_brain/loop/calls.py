"""A step that calls tools, in two values the step commits between: the calls journaled
and planned through the gates (`CallsPlanned`, which says whether their intent must be
durable before any is sent), then run (what the gates allow) with their results recorded
(`CallsResolved`: the call that waits for an operator, the `run_agent` calls whose
helpers start). A step whose calls name no usable tool gets one corrective note. Nothing
here commits, parks or starts a helper: the step does (`dispatch.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from tether_brain.clients.model import ModelTurn
from tether_brain.context import rules
from tether_brain.loop.acting import Actor
from tether_brain.loop.outcome import Outcome
from tether_brain.loop.planned import Planned
from tether_brain.loop.recording import describe_calls, record_result
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.helpers import RUN_AGENT
from tether_common.messages.events import Guard, Step, ToolCall
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.messages.runs import StepView


@dataclass(frozen=True, slots=True)
class CallsPlanned:
    """The step's calls as the gates planned them: the first that asks an operator, and
    the `run_agent` calls the gates let run (helpers start only while none asks)."""

    planned: list[Planned]
    asking: Planned | None
    helpers: list[Planned]

    @property
    def intent_first(self) -> bool:
        """The calls' intent is committed before any is sent: one waits for an operator,
        starts helpers, or has an effect that cannot be repeated."""
        return (
            self.asking is not None
            or bool(self.helpers)
            or any(p.decision == "run" and p.tool and not p.tool.idempotent for p in self.planned)
        )


@dataclass(frozen=True, slots=True)
class CallsResolved:
    """What the step's calls leave to the step after their results are recorded: the call
    to park for an operator, or the helpers to start (never both)."""

    asking: Planned | None
    helpers: list[CallRecord]


class Calls:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def usable(self, state: RunState, turn: ModelTurn) -> bool:
        """At least one call names a tool this replica knows, or one of an MCP server
        still connecting (the call waits for it to load, then meets the gates)."""
        return any(
            self.actor.descriptor(c.name) is not None
            or self.actor.toolbox.loading(c.name, state.options) is not None
            for c in turn.calls
        )

    def correct(self, state: RunState, turn: ModelTurn) -> Outcome:
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
        return Outcome.GO_ON

    async def journal_and_plan(self, state: RunState, turn: ModelTurn) -> CallsPlanned:
        """The turn's calls journaled (history, step list, events) and through the gates."""
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
        return CallsPlanned(planned, asking, helpers)

    async def execute_and_record(self, state: RunState, plan: CallsPlanned) -> CallsResolved:
        """Run what the gates allow and record the results. Helpers are the step's to
        start, and only while no call asks (then theirs are sent as any other call and
        refused: the loop alone starts children)."""
        asking = plan.asking
        runnable = [p for p in plan.planned if p not in plan.helpers or asking is not None]
        results = await self.actor.execute(state, runnable)
        for item, result in zip(runnable, results, strict=True):
            if item is not asking:
                record_result(state, item, result)
        state.counters.low_effort = all(r.ok for r in results)
        helpers = [] if asking is not None else [p.call for p in plan.helpers]
        return CallsResolved(asking, helpers)

    @staticmethod
    def prefetches(state: RunState) -> bool:
        """The run starts with its agent's prefetch calls: it has some, and is neither a
        helper (its task is its parent's) nor guide-only (it runs no tool)."""
        options = state.options
        return bool(options.prefetch) and not options.helper and not options.guide_only
