"""The only think-act loop. Each step: check the stops and limits, ask the model, pass
every call through the gates, run what is allowed, and commit what the step added as
one durable journal write. Each step comes to one `Outcome`.

A step reads top to bottom in `Loop._step`: each collaborator (turns, answers, calls,
parking, children, recovery) is called and hands back a value (`ModelTurn`,
`Settlement`, `CallsPlanned`, `CallsResolved`, `Recovered`); none holds another (the
`Actor`, which gates and sends calls, is shared), and only the loop commits, ends or
completes a run (`Loop._settle`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from sqlalchemy.exc import DBAPIError

from tether_brain.agents.quotas import Quotas
from tether_brain.clients.approval import ApprovalPort, Decision
from tether_brain.clients.model import ModelPort, ModelTurn
from tether_brain.context import rules
from tether_brain.context.profiles import Profiles
from tether_brain.context.prompts import STEP_LIMIT_ANSWER
from tether_brain.loop.acting import Actor
from tether_brain.loop.answers import Answers, ask_from_results, ended_early
from tether_brain.loop.calls import Calls
from tether_brain.loop.completion import Completion
from tether_brain.loop.finishing import digest_of, loop_in
from tether_brain.loop.outcome import Answered, Ending, Outcome, Settlement
from tether_brain.loop.parking import Parking
from tether_brain.loop.recovery import Recovery
from tether_brain.loop.sending import await_catalogue
from tether_brain.loop.stops import Stops
from tether_brain.loop.subagents import Children, Launch
from tether_brain.loop.turn import Turns
from tether_brain.persistence.store import StorePort
from tether_brain.state.clock import SYSTEM_CLOCK, Clock
from tether_brain.state.control import Control
from tether_brain.state.events import EventsPort, emit
from tether_brain.state.run import RunState
from tether_brain.tools.local import SkillLibrary
from tether_brain.tools.memory import Memory
from tether_brain.tools.remember import recall, recall_note
from tether_brain.tools.tenant_tools import current_tenant
from tether_common.errors import ConflictError, TetherError
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
        bus: EventsPort,
        store: StorePort,
        model: ModelPort,
        actor: Actor,
        approvals: ApprovalPort,
        skills: SkillLibrary,
        profiles: Profiles,
        *,
        launch: Launch,
        prices: Mapping[str, Mapping[str, float]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        quotas: Quotas | None = None,
        memory: Memory | None = None,
    ) -> None:
        self.memory = memory  # a thread's recall reads it
        self.clock = clock  # the run's active time (`max_seconds`) is measured on it
        self.stops = Stops(actor.agents, quotas)
        self.actor = actor
        self.parking = Parking(actor, approvals)
        # The tenant's `on_run_end` hooks are told by the one place an end commits.
        told = None if actor.hooks is None else actor.hooks.run_ended
        self.completion = Completion(bus, store, told=told)
        self.turns = Turns(
            model,
            actor.toolbox,
            actor.agents,
            skills,
            profiles,
            service_wait_s=actor.service_wait_s,
            prices=prices,
            hooks=actor.hooks,
        )
        self.calls = Calls(actor)
        self.children = Children(store, launch, actor.toolbox)
        self.answers = Answers(actor.toolbox, actor.agents, actor.hooks)
        self.recovery = Recovery(actor)

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
        current_tenant.set(state.tenant)  # its tenant's own tool servers, and no other's
        parent = parent_context(state.trace_parent)
        with tracer.start_as_current_span(
            "run", context=parent, kind=SpanKind.INTERNAL, links=links_to_current(parent)
        ) as span:
            span.set_attribute("tether.run_id", state.run_id)
            span.set_attribute("gen_ai.system", state.provider)
            try:
                await self._guarded(state, control, decision, helpers_done)
            finally:
                await self.completion.settle(state)  # the last commit's events are stored
            span.set_attribute("tether.run.status", state.status)

    async def _guarded(
        self, state: RunState, control: Control, decision: Decision | None, helpers_done: bool
    ) -> None:
        try:
            if helpers_done:
                await self.children.collect_summaries(state)
                await self.completion.commit(state)
            if decision is not None:
                if (gone := self.stops.agent_gone(state)) is not None:
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
        mark = self.clock.monotonic()
        outcome = await self._first(state, control)
        while not outcome.stops:
            state.active_seconds += self.clock.monotonic() - mark
            mark = self.clock.monotonic()
            if control.handback.is_set():
                return Outcome.HANDED_BACK
            if (ended := rules.boundary_stop(state, control.stop_reason)) is not None:
                answer = state.answer or (STEP_LIMIT_ANSWER if ended == "max_steps" else None)
                return await self._settle(
                    state, await self.answers.ending(state, "stopped", ended, answer)
                )
            if (gone := self.stops.agent_gone(state)) is not None:
                return await self.completion.end(state, "failed", gone, None)
            if (spent := await self.stops.spent_up(state)) is not None:
                return await self.completion.end(state, "stopped", spent, state.answer)
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

    async def _first(self, state: RunState, control: Control) -> Outcome:
        """Where the run stands when this task takes it: new, crashed too often, or
        taken over (recovered first)."""
        if state.status == "queued":
            return await self._begin(state)
        if state.takeovers > MAX_TAKEOVERS:
            return await self.completion.end(state, "failed", "repeated_crash", state.answer)
        stopping = control.stop.is_set() or state.stop_requested
        if stopping:  # a run stopped while parked takes back the request it waited on
            await self.parking.withdraw(state)
        recovered = await self.recovery.recover(state, stopping=stopping)
        if recovered is None:
            return Outcome.GO_ON
        card = recovered.card
        return await self._settle(
            state, Outcome.GO_ON if card is None else await self.parking.park(state, card)
        )

    async def _begin(self, state: RunState) -> Outcome:
        state.status = "running"
        await self._recall(state)
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
        if self.calls.prefetches(state):  # the agent's calls before the model's first turn
            # A runner restarting is waited for.
            await await_catalogue(state, self.actor.toolbox, self.actor.service_wait_s)
            # At step 0, by the model's own path: journaled (committed before anything not
            # idempotent, so a replica taking over resends them with their keys), through
            # every gate, run, their results in the history the first turn reads.
            return await self._act(state, ModelTurn(calls=list(state.options.prefetch)))
        await self.completion.commit(state)
        return Outcome.GO_ON

    async def _recall(self, state: RunState) -> None:
        """A thread that recalls: its best memories for the prompt, as a note just before
        it (after the system prompt and the earlier turns, so the prefix a server caches
        stays the same). Recalled text is untrusted, as a search's result: it taints."""
        if self.memory is None or not (found := await recall(self.memory, state)):
            return
        state.add_message(recall_note(found))
        state.counters.tainted = True
        state.audit_later("memory.recalled", {"memories": [m.memory_id for m in found]})

    async def _step(self, state: RunState, control: Control) -> Outcome:
        """The step's request (no tools on the last step or after a loop), priced, and the
        model's turn; then one of: a call in a step that offered no tools (one more round,
        or a guide-only run's answer), calls to act on (or one corrective note), or an
        answer to judge."""
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
            request = await self.turns.build_request(state, last, tools_off, looping)
        except TetherError as exc:
            reason = f"tools_unavailable: {exc.message}"
            return await self.completion.end(state, "failed", reason, None)
        if await self.turns.would_overspend(state, request):
            why = "the next call could exceed max_cost"
            emit(state, Guard(step=state.step, kind="budget_exhausted", why=why))
            return await self.completion.end(state, "stopped", "budget_exhausted", state.answer)
        turn = await self.turns.ask_model(state, request, control, self.completion.commit)
        if turn is None or turn.error is not None:
            return await self._settle(state, ended_early(turn, control))
        if tools_off and (turn.calls or self.answers.written_call(state, turn.text)):
            if not state.options.guide_only:
                return await self._final_round(state, turn, control)
            return await self._settle(state, await self.answers.guide_only(state, turn, last))
        if turn.calls or turn.finish_reason == "unusable_call":
            if self.calls.usable(state, turn):
                return await self._act(state, turn)
            if state.counters.corrections == 0:
                return await self._settle(state, self.calls.correct(state, turn))
        return await self._settle(state, await self.answers.judge(state, turn))

    async def _act(self, state: RunState, turn: ModelTurn) -> Outcome:
        """The turn's calls: journaled and gated, their intent committed before anything
        irreversible, run, then the run parks for an operator or its helpers, or goes on."""
        plan = await self.calls.journal_and_plan(state, turn)
        if plan.intent_first:
            await self.completion.commit(state)  # a replica taking over resends, never reruns
        resolved = await self.calls.execute_and_record(state, plan)
        if resolved.asking is not None:
            return await self._settle(state, await self.parking.park(state, resolved.asking))
        if resolved.helpers:
            return await self._settle(
                state, await self.children.start_helpers(state, resolved.helpers)
            )
        return await self._settle(state, Outcome.GO_ON)

    async def _final_round(self, state: RunState, turn: ModelTurn, control: Control) -> Outcome:
        """A call in a step that offered no tools: one more tools-off round asks for the
        answer from the results."""
        ask_from_results(state, turn)
        request = await self.turns.build_request(state, False, True, None)
        again = await self.turns.ask_model(state, request, control, self.completion.commit)
        if again is None or again.error is not None:
            return await self._settle(state, ended_early(again, control))
        return await self._settle(state, await self.answers.final_round(state, again))

    async def _settle(self, state: RunState, settlement: Settlement) -> Outcome:
        """Commit what the step's collaborators decided: the step's one durable write
        (then its events), or the run's end."""
        match settlement:
            case Outcome.HANDED_BACK:
                return settlement  # nothing of the step is committed: another replica redoes it
            case Outcome():
                await self.completion.commit(state)
                return settlement
            case Ending(status, reason, answer):
                return await self.completion.end(state, status, reason, answer)
            case Answered(answer):
                return await self._complete(state, answer)

    async def _complete(self, state: RunState, answer: str) -> Outcome:
        """End `completed` with the answer, or deliver the user messages queued meanwhile
        and go on."""
        queued = await self.completion.complete(state, answer)
        if not queued:
            return Outcome.ENDED
        await self.turns.deliver(state, queued)
        await self.completion.commit(state)
        return Outcome.GO_ON


def step_kind(state: RunState) -> str:
    """`tool` if the current step recorded a tool call's result (run or refused), else
    `model`."""
    for view in reversed(state.steps):
        if view.step != state.step:
            break
        if view.kind == "tool":
            return "tool"
    return "model"
