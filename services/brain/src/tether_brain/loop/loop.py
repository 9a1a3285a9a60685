"""The only think-act loop. Each step: check the stops and limits, ask the model, pass
every call through the gates, run what is allowed, and commit what the step added as
one durable journal write."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from sqlalchemy.exc import DBAPIError

from tether_brain.clients.approval import ApprovalClient, Decision, in_doubt
from tether_brain.clients.model import ModelClient, ModelTurn
from tether_brain.context import rules
from tether_brain.context.fitting import Fitter, estimate, reserve
from tether_brain.context.offering import RECENT_MESSAGES, compact_offer
from tether_brain.context.profiles import Profiles
from tether_brain.context.prompting import SKILL_NOTE, build_request
from tether_brain.context.prompts import STEP_LIMIT_ANSWER, answer_from_results
from tether_brain.loop.acting import Actor, Planned, in_doubt_after_resend, resends
from tether_brain.loop.finishing import ToolLoop, looks_like_call, loop_in
from tether_brain.loop.parking import Parking
from tether_brain.loop.recording import record_answer, record_result
from tether_brain.loop.subagents import Children
from tether_brain.persistence.store import RunStore
from tether_brain.skills import invoke
from tether_brain.state.control import Control
from tether_brain.state.events import emit, publish
from tether_brain.state.run import Entry, RunState, add_usage
from tether_brain.tools.helpers import RUN_AGENT
from tether_brain.tools.local import SkillLibrary
from tether_brain.tools.results import interrupted, not_run
from tether_brain.tools.toolbox import GateOutcome
from tether_common.bus import Bus
from tether_common.errors import ConflictError, TetherError
from tether_common.messages.gateway import (
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
)
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    ChildEnded,
    RunEvent,
    RunStatus,
    StepView,
)
from tether_common.messages.tools import ToolDescriptor
from tether_common.metrics import runs_ended, steps
from tether_common.telemetry import current_run_id

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

MAX_TAKEOVERS = 3
WAIT_POLL_S = 0.5  # between asks to a service nobody answers for, within the wait
REPUBLISH_ATTEMPTS = 8  # a committed end's events, retried over about 2.5 minutes
DEFAULT_WINDOW = 32_768
COMPACT_INSTRUCTION = (
    "Summarise the conversation below in a few sentences for the assistant who continues it: "
    "keep facts, tool results that matter, decisions and open questions. No preamble."
)


class Loop:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        model: ModelClient,
        actor: Actor,
        approvals: ApprovalClient,
        skills: SkillLibrary,
        *,
        windows: dict[str, int] | None = None,
        default_window: int = DEFAULT_WINDOW,
        prices: dict[str, dict[str, float]] | None = None,
        profiles: Profiles | None = None,
    ) -> None:
        self.profiles = profiles or Profiles(bus)
        self.prices = dict(prices or {})
        self.parking = Parking(actor, approvals)
        self.children = Children(store)
        self.windows = dict(windows or {})
        self.default_window = default_window
        self.skills = skills
        self.bus = bus
        self.store = store
        self.model = model
        self.actor = actor
        self._republishing: set[asyncio.Task[None]] = set()

    async def run(
        self,
        state: RunState,
        control: Control,
        decision: Decision | None = None,
        helpers_done: bool = False,
    ) -> None:
        """Advance `state` until it ends or is handed back; every outcome, even a crash of
        ours, is recorded. The run is one trace: every bus call below is its child."""
        current_run_id.set(state.run_id)
        with tracer.start_as_current_span("run", kind=SpanKind.INTERNAL) as span:
            span.set_attribute("tether.run_id", state.run_id)
            span.set_attribute("gen_ai.system", state.provider)
            await self._guarded(state, control, decision, helpers_done)
            span.set_attribute("tether.run.status", state.status)

    async def _guarded(
        self, state: RunState, control: Control, decision: Decision | None, helpers_done: bool
    ) -> None:
        try:
            if helpers_done:
                await self._collect_helpers(state)
            if decision is not None:
                await self.parking.resume(state, decision)
                await self._commit(state)
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
            if await self._ended(state):
                # The end is committed (only what came after it failed): it is final.
                log.exception("run %s: a failure after its committed end", state.run_id)
                return
            log.exception("run %s failed", state.run_id)
            state.pending.clear()
            await self._finish(state, "failed", f"internal_error: {type(exc).__name__}", None)

    async def _ended(self, state: RunState) -> bool:
        """Whether the run's end is already committed (read back: the failure may have
        come from the committing statement itself)."""
        try:
            status, _ = await self.store.status(state.run_id)
        except (OSError, DBAPIError, TetherError):
            return False
        return status in TERMINAL_STATUSES

    async def _advance(self, state: RunState, control: Control) -> None:
        mark = time.monotonic()
        if state.status == "queued":
            await self._begin(state)
        elif state.takeovers > MAX_TAKEOVERS:
            return await self._finish(state, "failed", "repeated_crash", state.answer)
        else:
            if await self._recover(state, stopping=control.stop.is_set() or state.stop_requested):
                return None
        while True:
            state.active_seconds += time.monotonic() - mark
            mark = time.monotonic()
            if control.handback.is_set():
                return None
            if (ended := rules.boundary_stop(state, control.stop.is_set())) is not None:
                return await self._finish(
                    state, "stopped", ended, state.answer or _limit_answer(ended)
                )
            with tracer.start_as_current_span("step") as span:
                span.set_attribute("tether.step", state.step + 1)
                if await self._step(state, control):
                    return None

    async def _begin(self, state: RunState) -> None:
        state.status = "running"
        await self._user_turn(state, state.prompt)
        # The trace id lets the runs console link the run to the tracing UI.
        span = trace.get_current_span().get_span_context()
        trace_id = format(span.trace_id, "032x") if span.is_valid else None
        emit(
            state,
            "run.start",
            prompt=state.prompt,
            provider=state.provider,
            model=state.model,
            trace_id=trace_id,
        )
        await self._commit(state)

    async def _user_turn(self, state: RunState, text: str) -> None:
        """A user message; `/name` tokens of stored skills inject those skills for the turn."""
        invocation = invoke(text, await self.skills.refresh(state.tenant))
        if (note := invocation.message()) is not None:
            state.add_message(note.model_copy(update={"name": SKILL_NOTE}))
        state.add_message(ChatMessage(role="user", content=invocation.prompt))
        for data in invocation.events():
            emit(state, "skill.used", step=state.step, **data)

    async def _step(self, state: RunState, control: Control) -> bool:
        """One step; True when the run has ended."""
        state.step += 1
        steps.add(1)
        last = state.step == state.max_steps
        # After a loop (finishing.py) the step offers no tools and asks for the answer.
        looping = None if last else loop_in(state.messages)
        if looping is not None:
            emit(
                state,
                "guard",
                step=state.step,
                kind="loop_broken",
                trigger=looping.kind,
                name=looping.tool,
            )
        tools_off = (
            last
            or looping is not None
            or state.max_steps == 1
            or bool(state.options.get("guide_only"))
        )
        try:
            request = await self._request(state, last, tools_off, looping)
        except TetherError as exc:
            return await self._end(state, "failed", f"tools_unavailable: {exc.message}", None)
        if self._would_overspend(state, request):
            emit(
                state,
                "guard",
                step=state.step,
                kind="budget_exhausted",
                why="the next call could exceed max_cost",
            )
            return await self._end(state, "stopped", "budget_exhausted", state.answer)
        turn = await self._turn(state, request, control)
        if turn is None:
            # Shutting down: nothing of this step was committed; another replica redoes it.
            return control.handback.is_set() or await self._end(
                state, "stopped", "stop_requested", None
            )
        if turn.error is not None:
            reason = f"model_error: {turn.error.code}: {turn.error.message}"
            return await self._end(state, "failed", reason, None)
        if tools_off and (turn.calls or self._written_call(state, turn.text)):
            return await self._tools_refused(state, turn, last, control)
        if turn.calls or turn.finish_reason == "unusable_call":
            return await self._calls(state, turn)
        return await self._answer(state, turn)

    async def _request(
        self, state: RunState, last: bool, tools_off: bool, looping: ToolLoop | None
    ) -> GenerateRequest:
        """The step's request in the model's prompt tier, fitted to its window. The
        compact tier offers only what the request plausibly needs, as one-line cards."""
        tier = await self.profiles.tier(state.provider, state.model)
        offered: list[OfferedToolSpec] = []
        hidden: str | None = None
        if not tools_off:
            await self._await_catalogue(state)  # a runner restarting is waited for
            toolbox = self.actor.toolbox
            if tier == "compact":
                # After an unusable call the narrowing may have missed: every tool, as cards.
                wanted = None if state.counters.corrections else state.prompt
                every = await toolbox.offered(state.options)
                offered, hidden = compact_offer(every, wanted, _recent(state), toolbox.keywords)
            else:
                offered, hidden = await toolbox.offer(state.options, _recent(state))
        skills = (await self.skills.refresh(state.tenant)).values()
        request = build_request(
            state, offered, last, skills, hidden, tier=tier, finishing=looping is not None
        )
        return await self._fit(state, request)

    async def _turn(
        self, state: RunState, request: GenerateRequest, control: Control
    ) -> ModelTurn | None:
        """One model turn with its usage and reasoning recorded; None when a stop came."""
        turn = await self._generate(state, request, control)
        if turn is None:
            return None
        state.usage = add_usage(state.usage, turn.usage)
        emit(state, "usage", **state.usage.model_dump(exclude={"version"}))
        if turn.thinking:
            emit(state, "step", step=state.step, kind="model", text="", thinking=turn.thinking)
        return turn

    def _written_call(self, state: RunState, text: str) -> bool:
        """A tool call written out as text (a tools-off step's text is not parsed for
        calls by the gateway). A guide-only run's text is its answer, whatever it holds."""
        if state.options.get("guide_only") or not text.strip():
            return False
        return looks_like_call(text, self._known_tools())

    def _known_tools(self) -> list[ToolDescriptor]:
        toolbox = self.actor.toolbox
        return [d for n in toolbox.names() if (d := toolbox.descriptor(n)) is not None]

    async def _fit(self, state: RunState, request: GenerateRequest) -> GenerateRequest:
        """Fit the request into the model's window; dropped history is summarised by a side
        generation when the model gives one (else it stays dropped), with a `compaction` event."""
        fitter = Fitter(
            self.windows.get(
                state.model or "", self.windows.get(state.provider, self.default_window)
            ),
            state.prompt,
        )
        if not fitter.over(request.messages, request.tools):
            return request
        fitted = fitter.fit(request.messages, request.tools)
        summary = await self._summarise(request, fitted.dropped) if fitted.dropped else None
        if summary:
            fitted.messages = [
                m.model_copy(update={"content": f"Summary of earlier messages: {summary}"})
                if m.content.startswith("[") and "left out" in m.content
                else m
                for m in fitted.messages
            ]
        emit(
            state,
            "compaction",
            step=state.step,
            actions=fitted.actions,
            dropped=len(fitted.dropped),
            summarised=bool(summary),
        )
        return request.model_copy(update={"messages": fitted.messages})

    def _would_overspend(self, state: RunState, request: GenerateRequest) -> bool:
        """Price the prompt (token estimate × price table) before sending it: a run stops
        rather than overspends its max_cost."""
        price = self.prices.get(state.model or "") or self.prices.get(state.provider)
        if state.limits.max_cost is None or price is None:
            return False
        window = self.windows.get(
            state.model or "", self.windows.get(state.provider, self.default_window)
        )
        cost = (
            estimate(request.messages, request.tools) * price.get("input", 0.0)
            + reserve(window) * price.get("output", 0.0)
        ) / 1e6
        return state.usage.cost + cost > state.limits.max_cost

    async def _summarise(self, request: GenerateRequest, dropped: list[ChatMessage]) -> str | None:
        transcript = "\n".join(f"{m.role}: {m.content[:2000]}" for m in dropped)
        side = request.model_copy(
            update={
                "messages": [
                    ChatMessage(role="system", content=COMPACT_INSTRUCTION),
                    ChatMessage(role="user", content=transcript),
                ],
                "tools": [],
            }
        )
        turn = await self.model.generate(side)
        text = turn.text.strip()
        return text[:4000] if turn.error is None and text and not turn.calls else None

    async def _generate(
        self, state: RunState, request: GenerateRequest, control: Control
    ) -> ModelTurn | None:
        """The model turn, or None when a stop arrived first. While no gateway answers (a
        restart) the turn is asked again for up to `service_wait_s`; the run says once,
        in a committed `guard` event of kind `waiting`, that it waits."""
        deadline = time.monotonic() + self.actor.service_wait_s
        told = False
        while True:
            turn = await self._generate_once(request, control)
            if turn is None or turn.error is None or turn.error.code != "no_responders":
                return turn
            left = deadline - time.monotonic()
            if left <= 0:
                return turn
            if not told:
                told = True
                log.info("run %s waits for a gateway (up to %ss)", state.run_id, left)
                emit(
                    state,
                    "guard",
                    step=state.step,
                    kind="waiting",
                    service="gateway",
                    wait_s=self.actor.service_wait_s,
                )
                await self._commit(state)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(control.wait_any(), min(WAIT_POLL_S, left))
            if control.stop.is_set() or control.handback.is_set():
                return None

    async def _generate_once(self, request: GenerateRequest, control: Control) -> ModelTurn | None:
        """One model turn, or None when a stop arrived first (the stream is cancelled)."""
        generation = asyncio.ensure_future(self.model.generate(request))
        waiter = asyncio.ensure_future(control.wait_any())
        done, _ = await asyncio.wait({generation, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if generation in done:
            return generation.result()
        generation.cancel()
        await asyncio.gather(generation, return_exceptions=True)
        return None

    async def _tools_refused(
        self, state: RunState, turn: ModelTurn, last: bool, control: Control
    ) -> bool:
        """A call in a step that offered no tools. A guide-only run answers with its
        text; any other run gets one more tools-off round (`_final_round`)."""
        answer = turn.text.strip()
        if not state.options.get("guide_only"):
            return await self._final_round(state, turn, control)
        if last:
            record_answer(state, answer or STEP_LIMIT_ANSWER)
            return await self._end(state, "stopped", "max_steps", answer or STEP_LIMIT_ANSWER)
        emit(state, "guard", step=state.step, kind="call_rejected", reason="guide_only")
        record_answer(state, answer)
        return await self._complete(state, answer)

    async def _final_round(self, state: RunState, turn: ModelTurn, control: Control) -> bool:
        """A final step never returns a tool call as its answer: the call goes into the
        history as text, and one more tools-off round asks for the answer from the
        results. A call (or nothing) again ends the run `no_answer`, with no answer."""
        emit(state, "guard", step=state.step, kind="call_rejected", reason="tools_off")
        text = turn.text.strip()
        said = _describe_calls(text, turn.calls) if turn.calls else text
        state.add_message(ChatMessage(role="assistant", content=said))
        state.add_message(ChatMessage(role="user", content=answer_from_results(state.prompt)))
        request = await self._request(state, False, True, None)
        again = await self._turn(state, request, control)
        if again is None:
            return control.handback.is_set() or await self._end(
                state, "stopped", "stop_requested", None
            )
        if again.error is not None:
            reason = f"model_error: {again.error.code}: {again.error.message}"
            return await self._end(state, "failed", reason, None)
        answer = again.text.strip()
        if answer and not again.calls and not self._written_call(state, answer):
            record_answer(state, answer)
            return await self._complete(state, answer)
        said = _describe_calls(answer, again.calls) if again.calls else answer
        state.add_message(ChatMessage(role="assistant", content=said or "(no answer)"))
        return await self._end(state, "stopped", "no_answer", None)

    async def _calls(self, state: RunState, turn: ModelTurn) -> bool:
        names = self.actor.toolbox.names()
        usable = [c for c in turn.calls if self.actor.descriptor(c.name) is not None]
        if usable:
            return await self._act(state, turn, turn.calls)
        if state.counters.corrections == 0:
            state.counters.corrections += 1
            state.counters.low_effort = False
            emit(
                state,
                "guard",
                step=state.step,
                kind="unusable_call",
                names=[c.name for c in turn.calls],
            )
            state.add_message(
                ChatMessage(role="assistant", content=turn.text.strip() or "(unusable tool call)")
            )
            state.add_message(ChatMessage(role="user", content=rules.corrective(names)))
            await self._commit(state)
            return False
        return await self._answer(state, turn)

    async def _act(self, state: RunState, turn: ModelTurn, calls: list[CallRecord]) -> bool:
        """Run the step's calls; True when the run parked for an operator's decision."""
        text = turn.text.strip()
        state.add_message(ChatMessage(role="assistant", content=text, tool_calls=calls))
        described = _describe_calls(text, calls)
        state.add_step(StepView(step=state.step, kind="model", text=described))
        emit(state, "step", step=state.step, kind="model", text=described)
        for call in calls:
            emit(
                state,
                "tool.call",
                step=state.step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
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
            await self._commit(state)  # intent is durable before anything irreversible
        runnable = [p for p in planned if p not in helpers or asking is not None]
        results = await self.actor.run(state, runnable)
        for item, result in zip(runnable, results, strict=True):
            if item is not asking:
                record_result(state, item, result)
        state.counters.low_effort = all(r.ok for r in results)
        if asking is not None and await self.parking.park(state, asking):
            await self._commit(state)
            return True
        if helpers and asking is None:
            await self._start_helpers(state, [p.call for p in helpers])
            return True
        await self._commit(state)
        return False

    async def _start_helpers(self, state: RunState, calls: list[CallRecord]) -> None:
        """Start one child run per run_agent call and park: the parent holds nothing until
        every child has ended (a notice, or the maintenance sweep, resumes it)."""
        tools = [t.name for t in await self.actor.toolbox.offered(state.options)]
        with tracer.start_as_current_span("run_agent") as span:  # children's runs nest here
            started = await self.children.start(state, calls, tools)
            span.set_attribute("tether.children", len(started))
        for call in calls:
            emit(
                state,
                "agent.start",
                step=state.step,
                call_id=call.id,
                child_run_id=started[call.id],
                task=call.arguments.get("task"),
            )
        state.status = "awaiting_agents"
        state.counters.pending_children = started
        await self._commit(state)

    async def _collect_helpers(self, state: RunState) -> None:
        """Resume a parent: each child's summary becomes its run_agent call's result."""
        for outcome in await self.children.collect(state):
            record_result(state, Planned(outcome.call, GateOutcome(True)), outcome.result)
            emit(
                state,
                "agent.end",
                step=state.step,
                call_id=outcome.call.id,
                child_run_id=outcome.child_id,
                ok=outcome.result.ok,
            )
            state.usage = add_usage(state.usage, outcome.usage)
            state.counters.tool_calls += outcome.tool_calls
        state.counters.pending_children = None
        state.counters.low_effort = False
        await self._commit(state)

    async def _recover(self, state: RunState, *, stopping: bool = False) -> bool:
        """After a takeover: calls left without a result are sent again through every
        gate, each with its idempotency key: an idempotent one is simply re-run; for a
        non-idempotent one the runner answers its recorded outcome (or runs it, if no send
        ever reached it), never running it twice. Only a call whose outcome stays unknown
        (the runner answers in doubt, or cannot be reached) or that the gates would no
        longer run gets an operator's reconcile card (the run parks; True) or, with no one
        to ask, is reported interrupted. A run being stopped runs nothing."""
        calls = state.unanswered_calls()
        if stopping:
            await self.parking.withdraw(state)
        state.counters.pending_approval = state.counters.pending_children = None
        if not calls:
            return False
        emit(state, "guard", step=state.step, kind="interrupted", calls=[c.name for c in calls])
        # A freshly started replica knows no tool yet: what each call was (idempotent or
        # not) is only known from the catalogue.
        await self._await_catalogue(state)
        tools = {c.id: self.actor.descriptor(c.name) for c in calls}
        known = [] if stopping else [c for c in calls if tools[c.id] is not None]
        planned = resends(await self.actor.plan(state, known))
        results = dict(
            zip((p.call.id for p in planned), await self.actor.run(state, planned), strict=True)
        )
        doubtful = [c for c in calls if in_doubt_after_resend(tools[c.id], results.get(c.id))]
        card = None if stopping or not doubtful else doubtful[0]
        for call in calls:
            if call is not card:
                result = results.get(call.id)
                if result is None or call in doubtful:
                    result = not_run(call) if stopping else interrupted(call)
                record_result(state, Planned(call, GateOutcome(True)), result)
        state.counters.low_effort = False
        parked = card is not None and await self._reconcile(state, card)
        await self._commit(state)
        return parked

    async def _await_catalogue(self, state: RunState) -> None:
        """Load the tool catalogue if none is known yet, waiting up to `service_wait_s`
        for a runner to answer (once known, a failed refresh keeps the last one). With
        none after the wait the caller goes on without: a step ends `tools_unavailable`,
        a recovery reports each call interrupted."""
        deadline = time.monotonic() + self.actor.service_wait_s
        told = False
        while True:
            try:
                await self.actor.toolbox.catalog()
                return
            except TetherError as exc:
                if time.monotonic() >= deadline:
                    log.warning("run %s: no tool catalogue: %s", state.run_id, exc)
                    return
            if not told:
                told = True
                emit(
                    state,
                    "guard",
                    step=state.step,
                    kind="waiting",
                    service="tools-runner",
                    wait_s=self.actor.service_wait_s,
                )
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

    async def _reconcile(self, state: RunState, call: CallRecord) -> bool:
        tool = self.actor.descriptor(call.name)
        assert tool is not None
        item = Planned(call, GateOutcome(True, tool=tool), in_doubt(tool))
        return await self.parking.park(state, item)

    async def _answer(self, state: RunState, turn: ModelTurn) -> bool:
        answer = turn.text.strip()
        note = rules.second_look(state, turn.thinking, answer) or self._not_done(state, answer)
        if note is not None:
            state.add_message(ChatMessage(role="assistant", content=answer or "(no answer)"))
            state.add_message(ChatMessage(role="user", content=note))
            state.counters.low_effort = False
            await self._commit(state)
            return False
        record_answer(state, answer)
        return await self._complete(state, answer)

    def _not_done(self, state: RunState, answer: str) -> str | None:
        """The agent's done criterion may send an answer back once."""
        rule = self.actor.agents.config(state.options.get("agent")).done
        if rule is None or state.counters.rejections or state.step >= state.max_steps:
            return None
        if not rule.rejects(answer):
            return None
        state.counters.rejections += 1
        emit(state, "guard", step=state.step, kind="not_done")
        return rule.message

    async def _complete(self, state: RunState, answer: str) -> bool:
        """An answer: deliver queued user messages and go on, or end `completed`."""

        def finishing() -> None:
            state.status, state.answer = "completed", answer
            emit(
                state,
                "run.end",
                status="completed",
                stop_reason=None,
                answer=answer,
                steps=state.step,
                usage=_usage(state),
            )

        queued = await self.store.finish_unless_queued(state, finishing)
        if not queued:
            state.unpublished += _events_of(state.published)
            await self._publish_committed(state)
            runs_ended.add(1, {"status": "completed"})
            await self._tell_parent(state)
            return True
        for text in queued:
            await self._user_turn(state, text)
        emit(
            state,
            "step",
            step=state.step,
            kind="model",
            text=f"{len(queued)} queued message(s) delivered",
        )
        state.counters.low_effort = False
        await self._commit(state)
        return False

    async def _end(
        self, state: RunState, status: RunStatus, reason: str | None, answer: str | None
    ) -> bool:
        await self._finish(state, status, reason, answer)
        return True

    async def _finish(
        self, state: RunState, status: RunStatus, reason: str | None, answer: str | None
    ) -> None:
        state.status, state.stop_reason, state.answer = status, reason, answer
        emit(
            state,
            "run.end",
            status=status,
            stop_reason=reason,
            answer=answer,
            steps=state.step,
            usage=_usage(state),
        )
        await self._commit(state)
        runs_ended.add(1, {"status": status})
        await self._tell_parent(state)

    async def _tell_parent(self, state: RunState) -> None:
        """The child-ended notice, best effort: the end is committed whatever happens
        here, and a notice lost is made up by the maintenance sweep (`parents_ready`)."""
        if state.parent_id is None:
            return
        notice = ChildEnded(parent_id=state.parent_id, child_id=state.run_id)
        try:
            await self.bus.publish(self.bus.subjects.run_child_ended, notice)
        except Exception as exc:  # the sweep resumes the parent
            log.warning("run %s: child-ended notice not sent: %s", state.run_id, exc)

    async def _commit(self, state: RunState) -> None:
        """The step's one durable write, then its events. Events are already in the
        journal, so a failed publish is retried with the next commit (ids deduplicate)."""
        await self.store.commit(state)
        state.unpublished += _events_of(state.published)
        if state.status in TERMINAL_STATUSES:
            await self._publish_committed(state)
            return
        try:
            await publish(self.bus, state.unpublished)
        except TetherError as exc:
            log.warning(
                "publishing %d events of %s failed: %s",
                len(state.unpublished),
                state.run_id,
                exc.message,
            )
            return
        state.unpublished = []

    async def _publish_committed(self, state: RunState) -> None:
        """Publish a committed end's events without ever raising: the end is decided, so
        a failed publish is retried in the background (bounded; the stream deduplicates
        by event id), never turned into a second end."""
        events, state.unpublished = list(state.unpublished), []
        try:
            await publish(self.bus, events)
        except Exception as exc:  # any failure here is only a publish
            log.warning("run %s: end events not published yet: %s", state.run_id, exc)
            task = asyncio.create_task(self._republish(state.run_id, events))
            self._republishing.add(task)
            task.add_done_callback(self._republishing.discard)

    async def _republish(self, run_id: str, events: list[RunEvent]) -> None:
        for attempt in range(REPUBLISH_ATTEMPTS):
            await asyncio.sleep(min(2.0**attempt, 30.0))
            try:
                await publish(self.bus, events)
                return
            except Exception as exc:  # retried, then left to the journal
                log.warning("run %s: republish %d failed: %s", run_id, attempt + 1, exc)
        log.error("run %s: end events left unpublished (they are in the journal)", run_id)


def _recent(state: RunState) -> str:
    """The question and the last messages: what the tools on offer should fit."""
    recent = state.messages[-RECENT_MESSAGES:]
    return "\n".join([state.prompt, *(m.content for m in recent)])


def _events_of(entries: list[Entry]) -> list[RunEvent]:
    return [RunEvent.model_validate(e.data) for e in entries if e.kind == "event"]


def _usage(state: RunState) -> dict[str, object]:
    return state.usage.model_dump(exclude={"version"})


def _limit_answer(reason: str) -> str | None:
    return STEP_LIMIT_ANSWER if reason == "max_steps" else None


def _describe_calls(text: str, calls: list[CallRecord]) -> str:
    names = ", ".join(f"{c.name}({c.arguments})" for c in calls)
    return (text + " " if text else "") + f"calls {names}"
