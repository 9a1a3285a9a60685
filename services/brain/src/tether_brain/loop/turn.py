"""One turn of the model: the step's request in the model's prompt tier (offered tools,
skills, the window it must fit), priced before it is sent, and the model raced against a
stop; a gateway or runner that is restarting is waited for. Also a user's turn (a prompt,
or messages queued while the run answered). The turn is handed back to the step: nothing
here commits but the step's own commit, which a turn waiting for a gateway is given."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from opentelemetry import trace

from tether_brain.agents.config import Agents
from tether_brain.clients import fallback
from tether_brain.clients.model import LiveTarget, ModelPort, ModelTurn
from tether_brain.context.cards import compact_card
from tether_brain.context.fitting import Fitter, request_estimate, reserve
from tether_brain.context.offering import RECENT_MESSAGES, compact_offer
from tether_brain.context.profiles import Profiles
from tether_brain.context.prompting import SKILL_NOTE, build_request
from tether_brain.context.wire import carried
from tether_brain.hooks import Hooks
from tether_brain.loop.finishing import ToolLoop, needed_first
from tether_brain.loop.sending import await_catalogue
from tether_brain.skills import invoke
from tether_brain.state.control import Control
from tether_brain.state.events import emit
from tether_brain.state.run import RunState, add_usage
from tether_brain.tools.local import SkillLibrary
from tether_brain.tools.toolbox import Toolbox
from tether_common.errors import ErrorCode, NotFoundError
from tether_common.messages.agents import ModelChoice
from tether_common.messages.events import Compaction, Guard, SkillUsed, Step, UsageData
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec
from tether_common.messages.runs import Usage

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.5  # between asks to a service nobody answers for, within the wait
COMPACT_INSTRUCTION = (
    "Summarise the conversation below in a few sentences for the assistant who continues it: "
    "keep facts, tool results that matter, decisions and open questions. No preamble."
)
Commit = Callable[[RunState], Awaitable[None]]  # the step's one durable write


class Turns:
    def __init__(
        self,
        model: ModelPort,
        toolbox: Toolbox,
        agents: Agents,
        skills: SkillLibrary,
        profiles: Profiles,
        *,
        service_wait_s: float,
        prices: Mapping[str, Mapping[str, float]] | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.model = model
        self.hooks = hooks  # a run with `before_answer` hooks streams no live text
        self.toolbox = toolbox  # the tools a step offers
        self.agents = agents  # the run's agent's fallback chain
        self.skills = skills
        self.profiles = profiles
        self.service_wait_s = service_wait_s  # how long a turn waits for a gateway, a runner
        self.prices = dict(prices or {})

    async def user_turn(self, state: RunState, text: str) -> None:
        """A user message; `/name` tokens of stored skills inject those skills for the turn."""
        invocation = invoke(text, await self.skills.refresh(state.tenant))
        if (note := invocation.message()) is not None:
            state.add_message(note.model_copy(update={"name": SKILL_NOTE}))
        state.add_message(ChatMessage(role="user", content=invocation.prompt))
        for data in invocation.events():
            emit(state, SkillUsed(step=state.step, **data))

    async def deliver(self, state: RunState, queued: list[str]) -> None:
        """User messages queued while the run answered, as its next turns: the answer to
        come is the run's (its `output` read afresh)."""
        state.output = None
        for text in queued:
            await self.user_turn(state, text)
        emit(
            state,
            Step(step=state.step, kind="model", text=f"{len(queued)} queued message(s) delivered"),
        )
        state.counters.low_effort = False

    async def build_request(
        self, state: RunState, last: bool, tools_off: bool, looping: ToolLoop | None
    ) -> GenerateRequest:
        """The step's request in the model's prompt tier, fitted to its window. The
        compact tier offers only what the request plausibly needs, as one-line cards."""
        tier = await self.profiles.tier(state.provider, state.model)
        offered: list[OfferedToolSpec] = []
        hidden: str | None = None
        must_call = False
        if not tools_off:
            # A runner restarting is waited for.
            await await_catalogue(state, self.toolbox, self.service_wait_s)
            toolbox = self.toolbox
            if tier == "compact":
                # After an unusable call the narrowing may have missed: every tool, as cards.
                wanted = None if state.counters.corrections else state.prompt
                every = await toolbox.offered(state.options)
                offered, hidden = compact_offer(every, wanted, _recent(state), toolbox.keywords)
                # A failure that names the call to make first: only that, and made now.
                first = needed_first(state.messages)
                if only := [compact_card(s) for s in every if s.name == first]:
                    offered, hidden, must_call = only, None, True
            else:
                offered, hidden = await toolbox.offer(state.options, _recent(state))
        skills = (await self.skills.refresh(state.tenant)).values()
        request = build_request(
            state,
            offered,
            last,
            skills,
            hidden,
            tier=tier,
            finishing=looping is not None,
            must_call=must_call,
        )
        return carried(await self._fit(state, request), state)

    async def ask_model(
        self, state: RunState, request: GenerateRequest, control: Control, commit: Commit
    ) -> ModelTurn | None:
        """One model turn with its usage and reasoning recorded; None when a stop came.
        `commit`: the step's, for the `waiting` event of a turn that waits for a gateway."""
        turn = await self._down_chain(state, request, control, commit)
        if turn is None:
            return None
        state.usage = add_usage(state.usage, turn.usage)
        emit(state, UsageData(**state.usage.model_dump(exclude={"version"})))
        if turn.thinking:
            emit(state, Step(step=state.step, kind="model", text="", thinking=turn.thinking))
        return turn

    async def would_overspend(self, state: RunState, request: GenerateRequest) -> bool:
        """Price the prompt (token estimate × price table) before sending it: a run stops
        rather than overspends its max_cost."""
        # The request's model: a fallback's own price (`_down_chain`).
        price = self.prices.get(request.model or "") or self.prices.get(request.provider)
        if state.limits.max_cost is None or price is None:
            return False
        window = await self.profiles.window(request.provider, request.model)
        cost = (
            request_estimate(request, state) * price.get("input", 0.0)
            + reserve(window) * price.get("output", 0.0)
        ) / 1e6
        return state.usage.cost + cost > state.limits.max_cost

    async def _fit(self, state: RunState, request: GenerateRequest) -> GenerateRequest:
        """Fit the request into the model's window; dropped history is summarised by a side
        generation when the model gives one (else it stays dropped), with a `compaction` event."""
        fitter = Fitter(await self.profiles.window(state.provider, state.model), state.prompt)
        if not fitter.request_over(request, state):
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
            Compaction(
                step=state.step,
                actions=fitted.actions,
                dropped=len(fitted.dropped),
                summarised=bool(summary),
            ),
        )
        return request.model_copy(update={"messages": fitted.messages})

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

    async def _down_chain(
        self, state: RunState, request: GenerateRequest, control: Control, commit: Commit
    ) -> ModelTurn | None:
        """The turn, asked of the run's model and then, while a model fails for a reason
        a later entry of the agent's fallback chain takes (`clients/fallback.py`), of that
        entry: each switch a `guard` event `model_fallback` of the step and an event on
        its span; every attempt's usage counts. Nothing is committed between attempts: a
        replica that takes the run over asks the turn again from the run's own model (a
        model turn has no effect outside). The request stays the one built for the run's
        model (its prompt tier and window)."""
        models = fallback.chain(request.provider, request.model, self._fallback(state))
        attempts: list[fallback.Attempt] = []
        position, usage = 0, Usage()
        while True:
            turn = await self._generate(state, request, control, commit)
            if turn is None:
                return None
            usage = add_usage(usage, turn.usage)
            if turn.error is None:
                break
            failed = fallback.Attempt(
                request.provider, request.model, turn.error.code, turn.error.message
            )
            attempts.append(failed)
            following = fallback.next_after(models, position, failed.code)
            if following is None:
                break
            choice = models[following]
            switched = request.model_copy(
                update={"provider": choice.provider, "model": choice.model}
            )
            if await self.would_overspend(state, switched):
                why = f"falling back to {choice.label} could exceed max_cost"
                emit(state, Guard(step=state.step, kind="budget_exhausted", why=why))
                break
            _say_switching(state, failed, choice)
            position, request = following, switched
        turn.usage = usage
        if turn.error is not None and len(attempts) > 1:
            turn.error = fallback.failure(attempts)
        return turn

    def _fallback(self, state: RunState) -> list[ModelChoice]:
        """The run's fallback chain as it stands now (none once its agent is gone)."""
        if not state.options.fallback:
            return []
        try:
            agent = self.agents.of_run(state.options, state.tenant)
        except NotFoundError:
            return []
        return fallback.in_force(state.options.fallback, agent)

    async def _generate(
        self, state: RunState, request: GenerateRequest, control: Control, commit: Commit
    ) -> ModelTurn | None:
        """The model turn, or None when a stop arrived first. While no gateway answers (a
        restart) the turn is asked again for up to `service_wait_s`; the run says once,
        in a committed `guard` event of kind `waiting`, that it waits."""
        deadline = time.monotonic() + self.service_wait_s
        told = False
        withheld = self.hooks is not None and await self.hooks.withhold_live_text(state)
        while True:
            live = None if withheld else self.model.live_target(state)
            turn = await self._generate_once(request, control, live)
            if turn is None or turn.error is None or turn.error.code != ErrorCode.NO_RESPONDERS:
                return turn
            left = deadline - time.monotonic()
            if left <= 0:
                return turn
            if not told:
                told = True
                log.info("run %s waits for a gateway (up to %ss)", state.run_id, left)
                _say_waiting(state, "gateway", self.service_wait_s)
                await commit(state)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(control.wait_any(), min(WAIT_POLL_S, left))
            if control.stop.is_set() or control.handback.is_set():
                return None

    async def _generate_once(
        self, request: GenerateRequest, control: Control, live: LiveTarget | None
    ) -> ModelTurn | None:
        """One model turn, its text live as it is written (unless `live` is None), or None
        when a stop arrived first (the stream is cancelled)."""
        generation = asyncio.ensure_future(self.model.generate(request, live=live))
        waiter = asyncio.ensure_future(control.wait_any())
        try:
            done, _ = await asyncio.wait({generation, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also when this task is cancelled (a fence): neither may outlive the turn.
            waiter.cancel()
            if not generation.done():
                generation.cancel()
                await asyncio.gather(generation, return_exceptions=True)
        return generation.result() if generation in done else None


def _say_switching(state: RunState, failed: fallback.Attempt, to: ModelChoice) -> None:
    reason = fallback.condition_of(failed.code)
    log.info("run %s: %s failed (%s), asking %s", state.run_id, failed.label, failed.code, to.label)
    emit(
        state,
        Guard(
            step=state.step,
            kind="model_fallback",
            provider=failed.provider,
            model=failed.model,
            code=failed.code,
            reason=reason,
            why=failed.message,
            to_provider=to.provider,
            to_model=to.model,
        ),
    )
    trace.get_current_span().add_event(
        "model.fallback",
        {
            "tether.fallback.from": failed.label,
            "tether.fallback.code": failed.code,
            "tether.fallback.reason": reason or "",
            "tether.fallback.to": to.label,
        },
    )


def _say_waiting(state: RunState, service: str, wait_s: float) -> None:
    emit(state, Guard(step=state.step, kind="waiting", service=service, wait_s=wait_s))


def _recent(state: RunState) -> str:
    """The question and the last messages: what the tools on offer should fit."""
    recent = state.messages[-RECENT_MESSAGES:]
    return "\n".join([state.prompt, *(m.content for m in recent)])
