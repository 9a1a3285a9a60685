"""Putting runs in motion on this replica: a new run or a child, a run taken over, a
parent whose helpers have ended, a parked run resumed by an operator's decision (only
one the approvals service signed for the approval it waits on). Every start claims the
run first, so exactly one replica advances it. A run a kill switch covers is put in
motion only to stop (`killed`) at its first boundary, whatever woke it."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import DBAPIError

from tether_brain.clients.approval import ApprovalClient, Decision, decision_problem
from tether_brain.loop.dispatch import Loop
from tether_brain.persistence.store import RunStore
from tether_brain.runs.tasks import RunTasks
from tether_brain.state.control import STOP_REQUESTED, Control
from tether_brain.state.kills import KILLED, Kills, RunScope
from tether_brain.state.run import RunState
from tether_common.decisions import DecisionKey
from tether_common.errors import TetherError
from tether_common.messages.approvals import ApprovalDecided
from tether_common.metrics import bus_errors, runs_started

log = logging.getLogger(__name__)


class Runner:
    def __init__(
        self,
        store: RunStore,
        tasks: RunTasks,
        loop: Loop,
        approvals: ApprovalClient,
        *,
        lease_s: float,
        decision_key: DecisionKey,
        kills: Kills,
    ) -> None:
        self.store = store
        self.kills = kills
        self.tasks = tasks
        self.approvals = approvals
        self.lease_s = lease_s
        self.decision_key = decision_key
        self.loop = loop

    def advance(
        self,
        state: RunState,
        decision: Decision | None = None,
        *,
        leased_at: float,
        helpers_done: bool = False,
        stopping: bool = False,
    ) -> None:
        """Advance the run in a task of the group; `leased_at` is when the request that
        gave us its lease was sent (the fence counts from there). A run a kill switch
        covers only stops: a decision that woke it is not acted on (its call is reported
        not run, its approval withdrawn), a new child makes no step."""
        stop = STOP_REQUESTED if stopping else None
        if self.kills.covers(RunScope.of(state)):
            stop, decision = KILLED, None

        async def work(control: Control) -> None:
            await self._advance(state, control, decision, helpers_done)

        self.tasks.spawn(state, work, leased_at=leased_at, stop=stop)

    async def launch_child(self, child: RunState) -> None:
        """A helper run the loop starts: created leased to us, then advanced here."""
        sent = self.tasks.leases.clock()
        await self.store.create(child, owner=self.tasks.owner, lease_s=self.lease_s)
        runs_started.add(1, {"provider": child.provider, "depth": child.depth})
        self.advance(child, leased_at=sent)

    async def _advance(
        self, state: RunState, control: Control, decision: Decision | None, helpers_done: bool
    ) -> None:
        """Advance the run; if it parked for an approval, look once at what the approvals
        service already holds. A decision made before the park was committed (an
        automated rule answers within milliseconds) found the run not parked and was
        dropped by `on_decision`; it is applied here, verified like any other. Either
        order ends in exactly one resume: both go through the same `claim_parked`."""
        await self.loop.run(state, control, decision, helpers_done)
        # Parked, ended or handed back: the lease went with that commit, so there is no
        # hold left to fence (what follows claims the run afresh if it needs it).
        self.tasks.let_go(state.run_id)
        if state.status != "awaiting_approval":
            return
        try:
            await self.reconcile_decision(state.run_id)
        except (TetherError, OSError, DBAPIError) as exc:
            log.warning("run %s: no look at an early decision: %s", state.run_id, exc)

    async def adopt_orphans(self, limit: int = 50) -> int:
        """Take over runs whose lease lapsed (their replica died or was fenced)."""
        sent = self.tasks.leases.clock()
        orphans = await self.store.leases.claim_orphans(
            self.tasks.owner, self.lease_s, limit=limit, stalling=self.tasks.stalling()
        )
        run_ids = [orphan.run_id for orphan in orphans]
        for orphan in orphans:
            lapsed = (
                "none, handed back"
                if orphan.lapsed_s is None
                else f"ended {orphan.lapsed_s:.2f} s before the claim"
            )
            if self.tasks.holds(orphan.run_id):
                # Our own task outlived its lease (a stall): the claim moved the fence, so
                # it could not commit again anyway; start afresh from what is stored.
                self.tasks.fence(
                    [orphan.run_id],
                    why=f"this replica's sweep claimed it back (its lease: {lapsed})",
                )
            log.warning(
                "taking over run %s from %s (its lease: %s)",
                orphan.run_id,
                orphan.held_by or "nobody",
                lapsed,
                extra={"run_id": orphan.run_id, "held_by": orphan.held_by},
            )
        # Each loaded and started on its own, side by side: a replica that died holding
        # many runs is taken over in one round of loads, and one slow load holds back
        # no other run (their new leases are ticking).
        await asyncio.gather(*(self._take_over(run_id, sent) for run_id in run_ids))
        return len(run_ids)

    async def _take_over(self, run_id: str, leased_at: float) -> None:
        try:
            state = await self.store.load(run_id)
        except Exception as exc:
            # Its lease lapses again and a later sweep (here or elsewhere) retries it.
            log.warning("run %s: claimed but not loaded: %s", run_id, exc)
            return
        log.info("run %s taken over at step %s", run_id, state.step)
        self.advance(state, leased_at=leased_at)

    async def resume_parent(self, parent_id: str) -> None:
        """Resume a parent parked for its sub-agents, if they have all ended (exactly one
        replica wins the claim)."""
        sent = self.tasks.leases.clock()
        state = await self.store.leases.claim_waiting(parent_id, self.tasks.owner, self.lease_s)
        if state is not None:
            self.advance(state, leased_at=sent, helpers_done=True)

    async def on_decision(self, decided: ApprovalDecided) -> None:
        """A decision arrived (any replica may get it): resume the parked run here, but
        only with a decision the approvals service signed for the approval the run waits
        on (`approval.decision_problem`); any other is refused and the run stays parked."""
        sent = self.tasks.leases.clock()
        state = await self.store.leases.claim_parked(decided.run_id, self.tasks.owner, self.lease_s)
        if state is None:
            return
        problem = decision_problem(self.decision_key, state, decided)
        if problem is not None:
            await self._refuse_decision(state, decided, problem)
            return
        self.advance(state, Decision.of(decided), leased_at=sent)

    async def _refuse_decision(
        self, state: RunState, decided: ApprovalDecided, problem: str
    ) -> None:
        """Put the run back as it was (parked, no lease) with the refusal in its trail, then
        look at what the approvals service really holds: a genuine decision that arrived
        while this one held the run found it running and was dropped, so it is applied
        from there."""
        log.warning(
            "refused a decision for run %s (approval %s, %s by %s): %s",
            state.run_id,
            decided.approval_id,
            decided.decision,
            decided.decided_by,
            problem,
        )
        bus_errors.add(1, {"service": "brain", "code": problem})
        state.audit_later(
            "approval.decision_refused",
            {
                "approval_id": decided.approval_id,
                "decision": decided.decision,
                "decided_by": decided.decided_by,
                "refused": problem,
            },
        )
        state.status = "awaiting_approval"
        await self.store.commit(state)
        await self.reconcile_decision(state.run_id)

    async def reconcile_decision(self, run_id: str) -> None:
        """Resume a parked run from its approval's stored decision if that one verifies;
        otherwise (pending, or written outside the approvals service) it stays parked."""
        state = await self.store.load(run_id)
        approval_id = (state.counters.pending_approval or {}).get("approval_id")
        if state.status != "awaiting_approval" or approval_id is None:
            return
        try:
            stored = await self.approvals.stored_decision(run_id, str(approval_id))
        except TetherError as exc:
            log.warning("cannot read approval %s back: %s", approval_id, exc.message)
            return
        if stored is not None and decision_problem(self.decision_key, state, stored) is None:
            await self.on_decision(stored)
