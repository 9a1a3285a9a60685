"""When the model answers: whether the answer is one yet (the text rules, the agent's
done criterion), a call in a step that offered no tools (a guide-only run's answer, else
one more tools-off round), and completing the run or delivering queued messages."""

from __future__ import annotations

from tether_brain.clients.model import ModelTurn
from tether_brain.context import rules
from tether_brain.context.prompts import STEP_LIMIT_ANSWER, answer_from_results
from tether_brain.loop.acting import Actor
from tether_brain.loop.completion import Completion
from tether_brain.loop.outcome import Outcome
from tether_brain.loop.recording import record_answer
from tether_brain.loop.turn import Turns
from tether_brain.state.control import Control
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common.messages.events import Guard, Step
from tether_common.messages.gateway import CallRecord, ChatMessage


class Answers:
    def __init__(self, actor: Actor, turns: Turns, completion: Completion) -> None:
        self.actor = actor
        self.turns = turns
        self.completion = completion

    async def answer(self, state: RunState, turn: ModelTurn) -> Outcome:
        answer = turn.text.strip()
        note = rules.second_look(state, turn.thinking, answer) or self._not_done(state, answer)
        if note is not None:
            state.add_message(ChatMessage(role="assistant", content=answer or "(no answer)"))
            state.add_message(ChatMessage(role="user", content=note))
            state.counters.low_effort = False
            await self.completion.commit(state)
            return Outcome.GO_ON
        record_answer(state, answer)
        return await self.complete(state, answer)

    async def tools_refused(
        self, state: RunState, turn: ModelTurn, last: bool, control: Control
    ) -> Outcome:
        """A call in a step that offered no tools. A guide-only run answers with its
        text; any other run gets one more tools-off round (`_final_round`)."""
        answer = turn.text.strip()
        if not state.options.guide_only:
            return await self._final_round(state, turn, control)
        if last:
            record_answer(state, answer or STEP_LIMIT_ANSWER)
            return await self.completion.end(
                state, "stopped", "max_steps", answer or STEP_LIMIT_ANSWER
            )
        emit(state, Guard(step=state.step, kind="call_rejected", reason="guide_only"))
        record_answer(state, answer)
        return await self.complete(state, answer)

    async def complete(self, state: RunState, answer: str) -> Outcome:
        """An answer: deliver queued user messages and go on, or end `completed`."""
        queued = await self.completion.complete(state, answer)
        if not queued:
            return Outcome.ENDED
        for text in queued:
            await self.turns.user_turn(state, text)
        emit(
            state,
            Step(step=state.step, kind="model", text=f"{len(queued)} queued message(s) delivered"),
        )
        state.counters.low_effort = False
        await self.completion.commit(state)
        return Outcome.GO_ON

    async def _final_round(self, state: RunState, turn: ModelTurn, control: Control) -> Outcome:
        """A final step never returns a tool call as its answer: the call goes into the
        history as text, and one more tools-off round asks for the answer from the
        results. A call (or nothing) again ends the run `no_answer`, with no answer."""
        emit(state, Guard(step=state.step, kind="call_rejected", reason="tools_off"))
        text = turn.text.strip()
        said = describe_calls(text, turn.calls) if turn.calls else text
        state.add_message(ChatMessage(role="assistant", content=said))
        state.add_message(ChatMessage(role="user", content=answer_from_results(state.prompt)))
        request = await self.turns.request(state, False, True, None)
        again = await self.turns.turn(state, request, control)
        if again is None or again.error is not None:
            return await self.ended_early(state, again, control)
        answer = again.text.strip()
        if answer and not again.calls and not self.turns.written_call(state, answer):
            record_answer(state, answer)
            return await self.complete(state, answer)
        said = describe_calls(answer, again.calls) if again.calls else answer
        state.add_message(ChatMessage(role="assistant", content=said or "(no answer)"))
        return await self.completion.end(state, "stopped", "no_answer", None)

    async def ended_early(
        self, state: RunState, turn: ModelTurn | None, control: Control
    ) -> Outcome:
        """A turn that brought no answer: a stop or hand-back came first (None; nothing of
        the step was committed, another replica redoes it), or the model failed."""
        if turn is None:
            if control.handback.is_set():
                return Outcome.HANDED_BACK
            return await self.completion.end(state, "stopped", control.why, None)
        assert turn.error is not None
        reason = f"model_error: {turn.error.code}: {turn.error.message}"
        return await self.completion.end(state, "failed", reason, None)

    def _not_done(self, state: RunState, answer: str) -> str | None:
        """The agent's done criterion may send an answer back once."""
        rule = self.actor.agents.of_run(state.options, state.tenant).done
        if rule is None or state.counters.rejections or state.step >= state.max_steps:
            return None
        if not rule.rejects(answer):
            return None
        state.counters.rejections += 1
        emit(state, Guard(step=state.step, kind="not_done"))
        return rule.message


def describe_calls(text: str, calls: list[CallRecord]) -> str:
    names = ", ".join(f"{c.name}({c.arguments})" for c in calls)
    return (text + " " if text else "") + f"calls {names}"
