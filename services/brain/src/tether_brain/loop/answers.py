"""When the model answers: whether the answer is one yet (the text rules, the agent's
done criterion, the tenant's `before_answer` hooks, a typed run's output schemas), and a
call in a step that offered no tools (a guide-only run's answer, else one more tools-off
round, which the step asks for). Each judgement comes back as a `Settlement` for the
step to commit: nothing here commits, ends or completes a run, or asks the model."""

from __future__ import annotations

import asyncio

from tether_brain.agents.config import Agents
from tether_brain.clients.model import ModelTurn
from tether_brain.context import rules
from tether_brain.context.prompts import STEP_LIMIT_ANSWER, answer_from_results
from tether_brain.context.typed import fits_typed, repair_note
from tether_brain.hooks import Hooks
from tether_brain.loop.finishing import looks_like_call
from tether_brain.loop.outcome import Answered, Ending, Outcome, Settlement
from tether_brain.loop.recording import describe_calls, record_answer
from tether_brain.state.control import Control
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.toolbox import Toolbox
from tether_common.errors import ErrorCode
from tether_common.messages.events import Guard
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.runs import RunStatus
from tether_common.messages.tools import ToolDescriptor
from tether_common.typed_answers import Violation, read_answer


class Answers:
    def __init__(self, toolbox: Toolbox, agents: Agents, hooks: Hooks | None) -> None:
        self.toolbox = toolbox  # what a call written out as text would name
        self.agents = agents  # the run's agent's done criterion
        self.hooks = hooks  # the tenants' lifecycle hooks (hooks/); None: none

    async def judge(self, state: RunState, turn: ModelTurn) -> Settlement:
        """The turn's text as the run's answer: sent back with a note while it is not one
        yet (the next step asks again), else accepted."""
        answer = turn.text.strip()
        note = rules.second_look(state, turn.thinking, answer) or self._not_done(state, answer)
        if note is not None:
            return _send_back(state, answer, note)
        return await self.accept(state, answer)

    async def accept(self, state: RunState, answer: str) -> Settlement:
        """An answer that stands, recorded (`Answered`: the step completes the run). A
        typed run's answer is first read against its output schemas (in a worker thread:
        bounded, but a large answer still takes milliseconds), its object kept as the
        run's `output`. The tenant's `before_answer` hooks first: they may block it (the
        run fails `answer_blocked`, the answer unrecorded) or replace it."""
        checked = await self._checked(state, answer)
        if isinstance(checked, Ending):
            return checked
        answer = checked
        if state.options.output_schemas:
            read = await asyncio.to_thread(read_answer, answer, state.options.output_schemas)
            if isinstance(read, Violation):
                return _not_typed(state, answer, read)
            state.output = read
        record_answer(state, answer)
        return Answered(answer)

    async def guide_only(self, state: RunState, turn: ModelTurn, last: bool) -> Settlement:
        """A guide-only run's call in a step that offered no tools: its text is its answer
        (on its last step, the run stops `max_steps` with it)."""
        answer = turn.text.strip()
        if last:
            ended = await self.ending(state, "stopped", "max_steps", answer or STEP_LIMIT_ANSWER)
            if ended.answer is not None:
                record_answer(state, ended.answer)
            return ended
        emit(state, Guard(step=state.step, kind="call_rejected", reason="guide_only"))
        return await self.accept(state, answer)

    async def ending(
        self, state: RunState, status: RunStatus, reason: str, answer: str | None
    ) -> Ending:
        """A run's end with an answer it did not accept as one (the step limit's, a
        guide-only run's last text): judged by the same `before_answer` hooks as every
        answer, so no answer leaves unjudged (blocked: the run fails `answer_blocked`
        with none; replaced: the replacement ends it)."""
        if answer is None:
            return Ending(status, reason)
        checked = await self._checked(state, answer)
        return checked if isinstance(checked, Ending) else Ending(status, reason, checked)

    async def _checked(self, state: RunState, answer: str) -> str | Ending:
        """The answer as the tenant's `before_answer` hooks let it stand, or the run's end
        when they block it."""
        if self.hooks is None:
            return answer
        checked = await self.hooks.before_answer(state, answer)
        if checked.blocked is not None:
            return Ending("failed", f"answer_blocked: {checked.blocked}")
        return checked.answer

    async def final_round(self, state: RunState, again: ModelTurn) -> Settlement:
        """The answer of the tools-off round `ask_from_results` asked for. A call (or
        nothing) again ends the run `no_answer`, with no answer."""
        answer = again.text.strip()
        if answer and not again.calls and not self.written_call(state, answer):
            return await self.accept(state, answer)
        said = describe_calls(answer, again.calls) if again.calls else answer
        state.add_message(ChatMessage(role="assistant", content=said or "(no answer)"))
        return Ending("stopped", "no_answer")

    def written_call(self, state: RunState, text: str) -> bool:
        """A tool call written out as text (a tools-off step's text is not parsed for
        calls by the gateway). A guide-only run's text is its answer, whatever it holds."""
        if state.options.guide_only or not text.strip():
            return False
        if fits_typed(state.options.output_schemas, text):
            return False  # a typed run's answer that fits is its answer, whatever it resembles
        known: list[ToolDescriptor] = [
            d for n in self.toolbox.names() if (d := self.toolbox.descriptor(n)) is not None
        ]
        return looks_like_call(text, known)

    def _not_done(self, state: RunState, answer: str) -> str | None:
        """The agent's done criterion may send an answer back once."""
        rule = self.agents.of_run(state.options, state.tenant).done
        if rule is None or state.counters.rejections or state.step >= state.max_steps:
            return None
        if not rule.rejects(answer):
            return None
        state.counters.rejections += 1
        emit(state, Guard(step=state.step, kind="not_done"))
        return rule.message


def ask_from_results(state: RunState, turn: ModelTurn) -> None:
    """A final step never returns a tool call as its answer: the call goes into the
    history as text, followed by the request for the answer from the results, for one
    more tools-off round (`Answers.final_round` reads its answer)."""
    emit(state, Guard(step=state.step, kind="call_rejected", reason="tools_off"))
    text = turn.text.strip()
    said = describe_calls(text, turn.calls) if turn.calls else text
    state.add_message(ChatMessage(role="assistant", content=said))
    state.add_message(ChatMessage(role="user", content=answer_from_results(state.prompt)))


def ended_early(turn: ModelTurn | None, control: Control) -> Settlement:
    """A turn that brought no answer: a stop or hand-back came first (None; nothing of
    the step is committed on a hand-back, another replica redoes it), or the model
    failed."""
    if turn is None:
        if control.handback.is_set():
            return Outcome.HANDED_BACK
        return Ending("stopped", control.why)
    assert turn.error is not None
    return Ending("failed", f"model_error: {turn.error.code}: {turn.error.message}")


def _send_back(state: RunState, answer: str, note: str) -> Settlement:
    """The answer is not one yet: it stays in the history, `note` follows it, and the
    next step asks again."""
    state.add_message(ChatMessage(role="assistant", content=answer or "(no answer)"))
    state.add_message(ChatMessage(role="user", content=note))
    state.counters.low_effort = False
    return Outcome.GO_ON


def _not_typed(state: RunState, answer: str, violation: Violation) -> Settlement:
    """A typed answer that does not fit, sent back naming the violation while repair
    rounds remain and a step is left (a repair is a step, under the run's budgets), as
    the done rule sends an answer back. Then the run fails `output_invalid`, naming the
    violation, its answer kept in the history, the steps and the run's `answer`."""
    repairing = (
        state.counters.repairs < state.options.output_repairs and state.step < state.max_steps
    )
    why = str(violation)
    emit(
        state,
        Guard(
            step=state.step,
            kind="output_invalid",
            why=why,
            reason="repair" if repairing else "repairs_spent",
        ),
    )
    if repairing:
        state.counters.repairs += 1
        return _send_back(state, answer, repair_note(violation))
    record_answer(state, answer)
    return Ending("failed", f"{ErrorCode.OUTPUT_INVALID}: {why}", answer)
