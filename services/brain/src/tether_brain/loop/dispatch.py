"""The only think-act loop. Each step: check the stops and limits, ask the model, pass
every call through the gates, run what is allowed, and commit what the step added as
one durable journal write. Each step comes to one `Outcome`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from sqlalchemy.exc import DBAPIError

from tether_brain.clients.approval import ApprovalClient, Decision
from tether_brain.clients.model import ModelClient
from tether_brain.context import rules
from tether_brain.context.profiles import Profiles
from tether_brain.context.prompts import STEP_LIMIT_ANSWER
from tether_brain.loop.acting import Actor
from tether_brain.loop.answers import Answers
from tether_brain.loop.calls import Calls
from tether_brain.loop.completion import Completion
from tether_brain.loop.finishing import digest_of, loop_in
from tether_brain.loop.outcome import Outcome
from tether_brain.loop.parking import Parking
from tether_brain.loop.recovery import Recovery
from tether_brain.loop.subagents import Children, Launch
from tether_brain.loop.turn import Turns
from tether_brain.persistence.store import RunStore
from tether_brain.state.control import Control
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.local import SkillLibrary
from tether_common.bus import Bus
from tether_common.errors import ConflictError, NotFoundError, TetherError
from tether_common.messages.events import Guard, RunStart
from tether_common.metrics import step_duration, steps
from tether_common.telemetry import current_run_id
from tether_common.traces import links_to_current, parent_context

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

MAX_TAKEOVERS = 3


class Loop:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        model: ModelClient,
        actor: Actor,
        approvals: ApprovalClient,
        skills: SkillLibrary,
        profiles: Profiles,
        *,
        launch: Launch,
        prices: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        self.actor = actor
        self.parking = Parking(actor, approvals)
        self.completion = Completion(bus, store)
        self.turns = Turns(model, actor, skills, profiles, self.completion, prices=prices)
        self.calls = Calls(actor, self.parking, Children(store, launch), self.completion)
        self.answers = Answers(actor, self.turns, self.completion)
        self.recovery = Recovery(actor, self.parking, self.turns, self.completion)

    async def run(
        self,
        state: RunState,
        control: Control,
        decision: Decision | None = None,
        helpers_done: bool = False,
    ) -> None:
        """Advance `state` until it ends, parks or is handed back; every outcome, even a
        crash of ours, is recorded. The run is one trace: this segment of its work (its
        start, a resumption after a decision or its helpers, a takeover) is a child of the
        span stored when the run was made, linked to what caused it (the decision's
        trace), and every bus call below is its child."""
        current_run_id.set(state.run_id)
        parent = parent_context(state.trace_parent)
        with tracer.start_as_current_span(
            "run", context=parent, kind=SpanKind.INTERNAL, links=links_to_current(parent)
        ) as span:
            span.set_attribute("tether.run_id", state.run_id)
            span.set_attribute("gen_ai.system", state.provider)
            await self._guarded(state, control, decision, helpers_done)
            span.set_attribute("tether.run.status", state.status)

    async def _guarded(
        self, state: RunState, control: Control, decision: Decision | None, helpers_done: bool
    ) -> None:
        try:
            if helpers_done:
                await self.calls.collect_helpers(state)
            if decision is not None:
                if (gone := self._agent_gone(state)) is not None:
                    await self.completion.end(state, "failed", gone, None)
                    return
                parked = await self.parking.resume(state, decision)
                await self.completion.commit(state)
                if parked is Outcome.PARKED:  # a stale staged effect: on a new card
                    return
            await self._advance(state, control)
        except asyncio.CancelledError:
            raise
        except ConflictError as exc:
            log.warning("run %s handed over: %s", state.run_id, exc.message)
        except (OSError, DBAPIError) as exc:
            # The database is away: nothing of this step was committed, and recording a
            # failure needs the database too. The lease lapses; a replica takes over.
            log.warning("run %s paused, the database is unreachable: %s", state.run_id, exc)
        except Exception as exc:
            if await self.completion.end_committed(state):
                # The end is committed (only what came after it failed): it is final.
                log.exception("run %s: a failure after its committed end", state.run_id)
                return
            log.exception("run %s failed", state.run_id)
            state.pending.clear()
            reason = f"internal_error: {type(exc).__name__}"
            await self.completion.end(state, "failed", reason, None)

    async def _advance(self, state: RunState, control: Control) -> Outcome:
        mark = time.monotonic()
        outcome = await self._first(state, control)
        while not outcome.stops:
            state.active_seconds += time.monotonic() - mark
            mark = time.monotonic()
            if control.handback.is_set():
                return Outcome.HANDED_BACK
            if (ended := rules.boundary_stop(state, control.stop_reason)) is not None:
                answer = state.answer or (STEP_LIMIT_ANSWER if ended == "max_steps" else None)
                return await self.completion.end(state, "stopped", ended, answer)
            if (gone := self._agent_gone(state)) is not None:
                return await self.completion.end(state, "failed", gone, None)
            with tracer.start_as_current_span("step") as span:
                span.set_attribute("tether.step", state.step + 1)
                outcome = await self._timed_step(state, control)
        return outcome

    async def _timed_step(self, state: RunState, control: Control) -> Outcome:
        """A step, counted and timed by its kind (`tool`: its model called tools; `model`:
        it did not), however it ends."""
        started = time.perf_counter()
        outcome: Outcome | None = None
        try:
            outcome = await self._step(state, control)
            return outcome
        finally:
            # A step that parked called a tool that waits (an approval, its helpers).
            kind = {"kind": "tool" if outcome is Outcome.PARKED else step_kind(state)}
            steps.add(1, kind)
            step_duration.record(time.perf_counter() - started, kind)

    def _agent_gone(self, state: RunState) -> str | None:
        """The end reason of a run whose agent it may no longer use (deleted, or no longer
        shared with the run's tenant, since the run started); None while it may. Checked
        before each step and before a decision is applied, so nothing more is done under
        an agent the run has lost."""
        try:
            self.actor.agents.of_run(state.options, state.tenant)
        except NotFoundError as exc:
            return f"agent_unavailable: {exc.message}"
        return None

    async def _first(self, state: RunState, control: Control) -> Outcome:
        """Where the run stands when this task takes it: new, crashed too often, or
        taken over (recovered first)."""
        if state.status == "queued":
            return await self._begin(state)
        if state.takeovers > MAX_TAKEOVERS:
            return await self.completion.end(state, "failed", "repeated_crash", state.answer)
        stopping = control.stop.is_set() or state.stop_requested
        return await self.recovery.recover(state, stopping=stopping)

    async def _begin(self, state: RunState) -> Outcome:
        state.status = "running"
        await self.turns.user_turn(state, state.prompt)
        # The trace id lets the runs console link the run to the tracing UI.
        span = trace.get_current_span().get_span_context()
        trace_id = format(span.trace_id, "032x") if span.is_valid else None
        emit(
            state,
            RunStart(
                prompt=state.prompt, provider=state.provider, model=state.model, trace_id=trace_id
            ),
        )
        await self.completion.commit(state)
        return Outcome.GO_ON

    async def _step(self, state: RunState, control: Control) -> Outcome:
        state.step += 1
        last = state.step == state.max_steps
        # After a loop (finishing.py) the step offers no tools and asks for the answer.
        # Not a thread's earlier turns.
        looping = None if last else loop_in(state.own_messages, digest_of(state))
        if looping is not None:
            emit(
                state,
                Guard(step=state.step, kind="loop_broken", trigger=looping.kind, name=looping.tool),
            )
        tools_off = last or looping is not None or state.max_steps == 1 or state.options.guide_only
        try:
            request = await self.turns.request(state, last, tools_off, looping)
        except TetherError as exc:
            reason = f"tools_unavailable: {exc.message}"
            return await self.completion.end(state, "failed", reason, None)
        if await self.turns.would_overspend(state, request):
            why = "the next call could exceed max_cost"
            emit(state, Guard(step=state.step, kind="budget_exhausted", why=why))
            return await self.completion.end(state, "stopped", "budget_exhausted", state.answer)
        turn = await self.turns.turn(state, request, control)
        if turn is None or turn.error is not None:
            return await self.answers.ended_early(state, turn, control)
        if tools_off and (turn.calls or self.turns.written_call(state, turn.text)):
            return await self.answers.tools_refused(state, turn, last, control)
        if turn.calls or turn.finish_reason == "unusable_call":
            if self.calls.usable(state, turn):
                return await self.calls.act(state, turn)
            if state.counters.corrections == 0:
                return await self.calls.correct(state, turn)
        return await self.answers.answer(state, turn)


def step_kind(state: RunState) -> str:
    """`tool` if the current step recorded a tool call's result (run or refused), else
    `model`."""
    for view in reversed(state.steps):
        if view.step != state.step:
            break
        if view.kind == "tool":
            return "tool"
    return "model"
