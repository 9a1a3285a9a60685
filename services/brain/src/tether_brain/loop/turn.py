"""One turn of the model: the step's request in the model's prompt tier (offered tools,
skills, the window it must fit), priced before it is sent, and the model raced against a
stop; a gateway or runner that is restarting is waited for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from tether_brain.clients.model import LiveTarget, ModelClient, ModelTurn
from tether_brain.context.cards import compact_card
from tether_brain.context.fitting import Fitter, request_estimate, reserve
from tether_brain.context.offering import RECENT_MESSAGES, compact_offer
from tether_brain.context.profiles import Profiles
from tether_brain.context.prompting import SKILL_NOTE, build_request
from tether_brain.context.wire import carried
from tether_brain.loop.acting import Actor
from tether_brain.loop.completion import Completion
from tether_brain.loop.finishing import ToolLoop, looks_like_call, needed_first
from tether_brain.skills import invoke
from tether_brain.state.control import Control
from tether_brain.state.events import emit
from tether_brain.state.run import RunState, add_usage
from tether_brain.tools.local import SkillLibrary
from tether_common.errors import ErrorCode, TetherError
from tether_common.messages.events import Compaction, Guard, SkillUsed, Step, UsageData
from tether_common.messages.gateway import ChatMessage, GenerateRequest, OfferedToolSpec
from tether_common.messages.tools import ToolDescriptor

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.5  # between asks to a service nobody answers for, within the wait
COMPACT_INSTRUCTION = (
    "Summarise the conversation below in a few sentences for the assistant who continues it: "
    "keep facts, tool results that matter, decisions and open questions. No preamble."
)


class Turns:
    def __init__(
        self,
        model: ModelClient,
        actor: Actor,
        skills: SkillLibrary,
        profiles: Profiles,
        completion: Completion,
        *,
        prices: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        self.model = model
        self.actor = actor
        self.skills = skills
        self.profiles = profiles
        self.completion = completion
        self.prices = dict(prices or {})

    async def user_turn(self, state: RunState, text: str) -> None:
        """A user message; `/name` tokens of stored skills inject those skills for the turn."""
        invocation = invoke(text, await self.skills.refresh(state.tenant))
        if (note := invocation.message()) is not None:
            state.add_message(note.model_copy(update={"name": SKILL_NOTE}))
        state.add_message(ChatMessage(role="user", content=invocation.prompt))
        for data in invocation.events():
            emit(state, SkillUsed(step=state.step, **data))

    async def request(
        self, state: RunState, last: bool, tools_off: bool, looping: ToolLoop | None
    ) -> GenerateRequest:
        """The step's request in the model's prompt tier, fitted to its window. The
        compact tier offers only what the request plausibly needs, as one-line cards."""
        tier = await self.profiles.tier(state.provider, state.model)
        offered: list[OfferedToolSpec] = []
        hidden: str | None = None
        must_call = False
        if not tools_off:
            await self.await_catalogue(state)  # a runner restarting is waited for
            toolbox = self.actor.toolbox
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

    async def turn(
        self, state: RunState, request: GenerateRequest, control: Control
    ) -> ModelTurn | None:
        """One model turn with its usage and reasoning recorded; None when a stop came."""
        turn = await self._generate(state, request, control)
        if turn is None:
            return None
        state.usage = add_usage(state.usage, turn.usage)
        emit(state, UsageData(**state.usage.model_dump(exclude={"version"})))
        if turn.thinking:
            emit(state, Step(step=state.step, kind="model", text="", thinking=turn.thinking))
        return turn

    def written_call(self, state: RunState, text: str) -> bool:
        """A tool call written out as text (a tools-off step's text is not parsed for
        calls by the gateway). A guide-only run's text is its answer, whatever it holds."""
        if state.options.guide_only or not text.strip():
            return False
        toolbox = self.actor.toolbox
        known: list[ToolDescriptor] = [
            d for n in toolbox.names() if (d := toolbox.descriptor(n)) is not None
        ]
        return looks_like_call(text, known)

    async def would_overspend(self, state: RunState, request: GenerateRequest) -> bool:
        """Price the prompt (token estimate × price table) before sending it: a run stops
        rather than overspends its max_cost."""
        price = self.prices.get(state.model or "") or self.prices.get(state.provider)
        if state.limits.max_cost is None or price is None:
            return False
        window = await self.profiles.window(state.provider, state.model)
        cost = (
            request_estimate(request, state) * price.get("input", 0.0)
            + reserve(window) * price.get("output", 0.0)
        ) / 1e6
        return state.usage.cost + cost > state.limits.max_cost

    async def await_catalogue(self, state: RunState) -> None:
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
                _say_waiting(state, "tools-runner", self.actor.service_wait_s)
            await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

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

    async def _generate(
        self, state: RunState, request: GenerateRequest, control: Control
    ) -> ModelTurn | None:
        """The model turn, or None when a stop arrived first. While no gateway answers (a
        restart) the turn is asked again for up to `service_wait_s`; the run says once,
        in a committed `guard` event of kind `waiting`, that it waits."""
        deadline = time.monotonic() + self.actor.service_wait_s
        told = False
        while True:
            turn = await self._generate_once(request, control, self.model.live_target(state))
            if turn is None or turn.error is None or turn.error.code != ErrorCode.NO_RESPONDERS:
                return turn
            left = deadline - time.monotonic()
            if left <= 0:
                return turn
            if not told:
                told = True
                log.info("run %s waits for a gateway (up to %ss)", state.run_id, left)
                _say_waiting(state, "gateway", self.actor.service_wait_s)
                await self.completion.commit(state)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(control.wait_any(), min(WAIT_POLL_S, left))
            if control.stop.is_set() or control.handback.is_set():
                return None

    async def _generate_once(
        self, request: GenerateRequest, control: Control, live: LiveTarget
    ) -> ModelTurn | None:
        """One model turn, its text live as it is written, or None when a stop arrived
        first (the stream is cancelled)."""
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


def _say_waiting(state: RunState, service: str, wait_s: float) -> None:
    emit(state, Guard(step=state.step, kind="waiting", service=service, wait_s=wait_s))


def _recent(state: RunState) -> str:
    """The question and the last messages: what the tools on offer should fit."""
    recent = state.messages[-RECENT_MESSAGES:]
    return "\n".join([state.prompt, *(m.content for m in recent)])
