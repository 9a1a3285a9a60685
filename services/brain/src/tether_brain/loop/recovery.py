"""Recovery after a takeover: the calls a dead replica left without a result are sent
again through every gate with their idempotency keys; what stays unknown is handed to
the step as the call for an operator's reconcile card, or reported interrupted. The step
parks and commits (`dispatch.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from tether_brain.clients.approval import in_doubt
from tether_brain.loop.acting import Actor
from tether_brain.loop.planned import Planned, in_doubt_after_resend, resends
from tether_brain.loop.recording import record_result
from tether_brain.loop.sending import await_catalogue
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_brain.tools.results import interrupted, not_run
from tether_brain.tools.toolbox import GateOutcome
from tether_common.messages.events import Guard
from tether_common.messages.gateway import CallRecord


@dataclass(frozen=True, slots=True)
class Recovered:
    """The calls left without a result are answered, but for `card`: the call whose
    outcome stays unknown, for an operator's reconcile card (None: none)."""

    card: Planned | None


class Recovery:
    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    async def recover(self, state: RunState, *, stopping: bool = False) -> Recovered | None:
        """After a takeover: calls left without a result are sent again through every
        gate, each with its idempotency key: an idempotent one is simply re-run; for a
        non-idempotent one the runner answers its recorded outcome (or runs it, if no send
        ever reached it), never running it twice. Only a call whose outcome stays unknown
        (the runner answers in doubt, or cannot be reached) or that the gates would no
        longer run gets an operator's reconcile card (the step parks the run) or, with no
        one to ask, is reported interrupted. A run being stopped runs nothing. None: no
        call was left without a result (nothing to commit)."""
        calls = state.unanswered_calls()
        state.counters.pending_approval = state.counters.pending_children = None
        if not calls:
            return None
        emit(state, Guard(step=state.step, kind="interrupted", calls=[c.name for c in calls]))
        # A freshly started replica knows no tool yet: what each call was (idempotent or
        # not) is only known from the catalogue.
        await await_catalogue(state, self.actor.toolbox, self.actor.service_wait_s)
        tools = {c.id: self.actor.descriptor(c.name) for c in calls}
        known = [] if stopping else [c for c in calls if tools[c.id] is not None]
        planned = resends(await self.actor.plan(state, known))
        results = dict(
            zip((p.call.id for p in planned), await self.actor.execute(state, planned), strict=True)
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
        return Recovered(None if card is None else self._card(state, card))

    def _card(self, state: RunState, call: CallRecord) -> Planned:
        """The reconcile card's call: what the gates ask now goes on it ("run it again"
        answers that too)."""
        tool = self.actor.descriptor(call.name)
        assert tool is not None
        now = self.actor.verdict(state, tool, call)
        return Planned(call, GateOutcome(True, tool=tool), in_doubt(tool, now))
