"""Starting, reading, stopping and messaging runs; owns the tasks that advance them, the
leases that say which replica advances which run, and the takeover of orphaned runs.

Fencing: a replica acts on a run only while it can prove its lease. Each lease is counted
from the moment the request that set it was sent (`leases.Leases`); once
`lease_s * (1 - lease_margin)` has passed without a renewal, the run's task is cancelled
and the run dropped from memory (nothing more is committed or published for it), before
any other replica may claim it. A replica that cannot reach NATS for `bus_loss_s` stops
renewing (it could not move its runs anyway), so they pass to one that can. The commit
itself is conditional on the lease in the database (`store.COMMIT_STEP`), so a replica
that was paused and wakes up late writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from base64 import b64decode
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from sqlalchemy.exc import DBAPIError

from tether_brain.agents.config import BUDGET_FIELDS
from tether_brain.clients.approval import Decision, decision_problem
from tether_brain.loop.loop import Loop
from tether_brain.persistence.store import RunStore
from tether_brain.runs.leases import Leases
from tether_brain.settings import BrainSettings
from tether_brain.state.control import Control
from tether_brain.state.run import DEFAULT_AGENT, Limits, RunState
from tether_common.background import FailureLog, every
from tether_common.bus import Bus
from tether_common.decisions import DecisionKey
from tether_common.errors import AuthError, MessageError, NotFoundError, TetherError
from tether_common.identity import Action, Principal
from tether_common.messages.approvals import ApprovalDecided
from tether_common.messages.base import decode
from tether_common.messages.identity import DEFAULT_TENANT
from tether_common.messages.outputs import MAX_INLINE_BYTES, GetOutput, OutputContent
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    ChildEnded,
    ListRuns,
    QueueMessage,
    RunAccepted,
    RunEvent,
    RunList,
    RunSummary,
    RunView,
    StartRun,
    StopRun,
)
from tether_common.metrics import bus_errors, runs_fenced, runs_started

log = logging.getLogger(__name__)


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class RunManager:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        loop: Loop,
        settings: BrainSettings,
        *,
        decision_key: DecisionKey,
    ) -> None:
        self.bus = bus
        self.store = store
        self.loop = loop
        self.settings = settings
        self.decision_key = decision_key
        self.owner = replica_id()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._controls: dict[str, Control] = {}
        self._maintainer: asyncio.Task[None] | None = None
        self.leases = Leases(settings.lease_s, settings.lease_margin)
        self._fenced: set[asyncio.Task[None]] = set()  # cancelled, still winding down
        self._bus_seen = self.leases.clock()  # the last NATS round trip's send time
        loop.children.launch = self._launch_child
        loop.actor.service_wait_s = settings.service_wait_s
        loop.actor.toolbox.heartbeat_s = settings.tool_heartbeat_s or None

    async def _launch_child(self, child: RunState) -> None:
        sent = self.leases.clock()
        await self.store.create(child, owner=self.owner, lease_s=self.settings.lease_s)
        runs_started.add(1, {"provider": child.provider, "depth": child.depth})
        self._spawn(child, leased_at=sent)

    # ---- starting and advancing --------------------------------------------------

    # ---- who may: every client-facing method takes the caller's principal -----------

    async def authorize(self, who: Principal, action: Action, run_id: str) -> None:
        """`who` may take `action` on the run: 403 for a role that never may, 404 (as for
        a missing run) for a run out of its reach. Checked on the stored row, whose tenant
        and owner never change after the run is made."""
        tenant, owner, agent = await self.store.belongs(run_id)
        try:
            who.require(action, tenant, owner, agent_owner=self._agent_owner(agent))
        except NotFoundError:
            # Word for word the answer for a run that does not exist.
            raise NotFoundError(f"no run '{run_id}'") from None

    def _agent_owner(self, agent: str | None) -> str | None:
        try:
            return self.loop.actor.agents.config(agent).owner
        except NotFoundError:
            return None

    def check_use(self, who: Principal, req: StartRun) -> tuple[str, str | None]:
        """The provider and model the run will use, if `who` may use them with the agent
        and mode asked for (403 naming the first refused). A role below operator with no
        agent, provider or model limit of its own gets the brain's configured ones (the
        default agent, the configured provider and model): which agent acts and which
        hosted provider is billed is configuration, never the caller's choice."""
        who.require("runs.start")
        provider = req.provider or self.settings.provider
        model = req.model or self.settings.model
        config = self.loop.actor.agents.config(req.agent)  # 404 for an unknown agent
        agent = req.agent or DEFAULT_AGENT
        # An agent put in a tenant serves that tenant's runs only (another tenant's looks
        # missing); the `default` tenant's agents (the settings' seeds) serve every tenant.
        shared = config.tenant in (DEFAULT_TENANT, who.tenant)
        if not shared and who.reach_of("runs.start") != "all":
            raise NotFoundError(f"no agent '{agent}'")
        who.check_use(agent=agent, provider=provider, model=model, mode=req.mode)
        self.loop.actor.agents.check_use(agent, provider, model)  # the agent's own lists
        if who.reach_of("runs.start") == "all" or who.role == "operator":
            return provider, model
        # Below operator, what the token does not list is the configured default (an
        # owner may also use its own agents).
        if who.agents is None and agent != DEFAULT_AGENT and config.owner != who.name:
            raise AuthError(f"this token may not use the agent '{agent}'", code="forbidden")
        if who.providers is None and provider != self.settings.provider:
            raise AuthError(f"this token may not use the provider '{provider}'", code="forbidden")
        if who.models is None and model != self.settings.model:
            raise AuthError(f"this token may not use the model '{model}'", code="forbidden")
        return provider, model

    # ---- starting and advancing --------------------------------------------------

    async def start(self, req: StartRun, who: Principal) -> RunAccepted:
        provider, model = self.check_use(who, req)
        # The agent's budget defaults fill what the request leaves open; its ceilings cap.
        asked = req.model_dump(include=set(BUDGET_FIELDS))
        budget = self.loop.actor.agents.budgets(req.agent, asked)
        if budget["max_tokens"] is not None and provider not in self.settings.usage_providers:
            raise MessageError(
                f"max_tokens cannot be enforced: provider '{provider}' does not report token usage",
                code="limit_unenforceable",
            )
        now = datetime.now(UTC)
        options = req.model_dump(
            include={
                "agent",
                "allow_shell",
                "allow_web",
                "mode",
                "guide_only",
                "research",
                "interactive",
            },
            exclude_none=True,
        )
        state = RunState(
            run_id=f"run_{uuid.uuid4().hex}",
            prompt=req.prompt,
            provider=provider,
            model=model,
            limits=Limits(
                max_steps=min(
                    budget["max_steps"] or self.settings.max_steps, self.settings.step_ceiling
                ),
                max_tool_calls=budget["max_tool_calls"],
                max_cost=budget["max_cost"],
                max_tokens=budget["max_tokens"],
                max_seconds=budget["max_seconds"],
            ),
            created_at=now,
            updated_at=now,
            options=options,
            fence=1,
            tenant=who.tenant,
            owner=who.name,
        )
        sent = self.leases.clock()
        await self.store.create(state, owner=self.owner, lease_s=self.settings.lease_s)
        runs_started.add(1, {"provider": state.provider})
        self._spawn(state, leased_at=sent)
        return RunAccepted(run_id=state.run_id, status=state.status)

    def _spawn(
        self,
        state: RunState,
        decision: Decision | None = None,
        *,
        leased_at: float,
        helpers_done: bool = False,
        stopping: bool = False,
    ) -> None:
        """Advance the run in a task of its own; `leased_at` is when the request that gave
        us its lease was sent (the fence counts from there)."""
        self.leases.taken(state.run_id, leased_at)
        control = self._controls.setdefault(state.run_id, Control())
        if stopping:
            control.stop.set()
        task = asyncio.create_task(
            self._advance(state, control, decision, helpers_done), name=f"run:{state.run_id}"
        )
        self._tasks[state.run_id] = task

        def forget(task: asyncio.Task[None]) -> None:
            if self._tasks.get(state.run_id) is not task:
                return  # the run was resumed by a newer task (a decision already there)
            self._tasks.pop(state.run_id, None)
            self._controls.pop(state.run_id, None)
            self.leases.forget(state.run_id)
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.error("run task %s died: %r (its lease will lapse)", state.run_id, exc)

        task.add_done_callback(forget)

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
        self.leases.forget(state.run_id)
        if state.status != "awaiting_approval":
            return
        try:
            await self.reconcile_decision(state.run_id)
        except (TetherError, OSError, DBAPIError) as exc:
            log.warning("run %s: no look at an early decision: %s", state.run_id, exc)

    async def run_maintenance(self) -> None:
        """Probe NATS, renew our leases, fence the runs whose lease we cannot prove, and
        adopt orphaned runs, forever (until cancelled). Separate loops, so a renewal stuck
        on a partition never delays the fence, nor a slow adoption the renewal."""
        lease_s = self.settings.lease_s
        async with asyncio.TaskGroup() as group:
            group.create_task(every(lease_s / 4, self._probe_bus, FailureLog(log, "NATS probe")))
            group.create_task(every(lease_s / 4, self._renew, FailureLog(log, "lease renewal")))
            group.create_task(self._fencing())
            group.create_task(every(lease_s / 3, self._adopt, FailureLog(log, "run adoption")))

    def bus_usable(self) -> bool:
        """NATS answered a round trip within `bus_loss_s`: runs held here can still move."""
        return self.leases.clock() - self._bus_seen < self.settings.bus_loss_s

    async def _probe_bus(self) -> None:
        sent = self.leases.clock()
        await self.bus.round_trip(timeout=self.settings.bus_loss_s)
        self._bus_seen = max(self._bus_seen, sent)

    async def _renew(self) -> None:
        """Extend the leases of the runs advancing here; none while NATS is lost (their
        leases lapse, they are fenced here and taken over by a replica that reaches it)."""
        if not self._tasks or not self.bus_usable():
            return
        sent = self.leases.clock()
        renewed = await asyncio.wait_for(
            self.store.renew(self.owner, self.settings.lease_s, list(self._tasks)),
            self.settings.lease_s,
        )
        self.leases.renewed(renewed, sent)

    async def _fencing(self) -> None:
        """Fence every run whose hold may have lapsed, checked a few times per margin."""
        tick = self.settings.lease_s * self.settings.lease_margin / 4
        while True:
            if lapsed := self.leases.lapsed():
                self.fence(lapsed)
            await asyncio.sleep(tick)

    def fence(self, run_ids: list[str]) -> None:
        """Stop acting on these runs at once: cancel their tasks (a commit in flight is
        refused by the database once the lease is out) and forget them, so nothing more
        is committed or published for them here."""
        for run_id in run_ids:
            age = self.leases.age(run_id)
            self.leases.forget(run_id)
            self._controls.pop(run_id, None)
            task = self._tasks.pop(run_id, None)
            if task is None:
                continue
            task.cancel()
            self._fenced.add(task)
            task.add_done_callback(self._fenced.discard)
            runs_fenced.add(1)
            log.warning(
                "fenced run %s: its lease was last set %.2f s ago (NATS %s); left to another replica",
                run_id,
                age or 0.0,
                "reachable" if self.bus_usable() else "lost",
            )

    async def _adopt(self) -> None:
        if not self.bus_usable():
            return
        await self.adopt_orphans()
        for parent_id in await self.store.parents_ready():
            await self.resume_parent(parent_id)

    async def adopt_orphans(self) -> int:
        sent = self.leases.clock()
        run_ids = await self.store.claim_orphans(self.owner, self.settings.lease_s, limit=50)
        for run_id in run_ids:
            if run_id in self._tasks:
                # Our own task outlived its lease (a stall): the claim moved the fence, so
                # it could not commit again anyway; start afresh from what is stored.
                self.fence([run_id])
            state = await self.store.load(run_id)
            log.info("taking over run %s at step %s", run_id, state.step)
            self._spawn(state, leased_at=sent)
        return len(run_ids)

    def begin_maintenance(self) -> None:
        self._maintainer = asyncio.create_task(self.run_maintenance(), name="leases")

    # ---- reading and steering ----------------------------------------------------

    async def get(self, run_id: str, who: Principal) -> RunView:
        await self.authorize(who, "runs.read", run_id)
        state = await self.store.load(run_id)
        return RunView(
            run_id=state.run_id,
            status=state.status,
            stop_reason=state.stop_reason,
            prompt=state.prompt,
            answer=state.answer,
            provider=state.provider,
            model=state.model,
            steps=state.steps,
            usage=state.usage,
            parent_id=state.parent_id,
            depth=state.depth,
            tenant=state.tenant,
            owner=state.owner,
            created_at=state.created_at,
            updated_at=state.updated_at,
        )

    async def list_runs(self, req: ListRuns, who: Principal) -> RunList:
        """The runs within `who`'s reach (the filter is in the query: a page is never
        short because of rows the caller may not see)."""
        scope = who.reach("runs.read")
        owned: list[str] = []
        if scope.owner is not None:
            configs = self.loop.actor.agents.configs
            owned = [agent for agent, c in configs.items() if c.owner == who.name]
        rows = await self.store.listing(
            status=req.status,
            parent_id=req.parent_id,
            before=req.before,
            limit=req.limit,
            agent=req.agent,
            since=req.since,
            scope=scope,
            owned_agents=owned,
        )
        return RunList(runs=[RunSummary.model_validate(row, from_attributes=True) for row in rows])

    async def stop(self, req: StopRun, who: Principal) -> RunAccepted:
        await self.authorize(who, "runs.stop", req.run_id)
        return await self._stop(req)

    async def _stop(self, req: StopRun) -> RunAccepted:
        """Durable request (any replica that holds or later adopts the run sees it), and a
        broadcast so the holder stops at its next boundary, cancelling a model stream.
        A parked run is ended here; every descendant is stopped too."""
        status = await self.store.request_stop(req.run_id)
        if status in TERMINAL_STATUSES:
            return RunAccepted(run_id=req.run_id, status=status)
        for child_id in await self.store.live_children(req.run_id):
            await self._stop(StopRun(run_id=child_id))
        sent = self.leases.clock()
        if status in (
            "awaiting_approval",
            "awaiting_agents",
        ) and await self.store.claim_parked_to_stop(req.run_id, self.owner, self.settings.lease_s):
            self._spawn(await self.store.load(req.run_id), leased_at=sent, stopping=True)
        else:
            await self.bus.publish(self.bus.subjects.run_stopping, req)
        return RunAccepted(run_id=req.run_id, status=status)

    async def on_stop_broadcast(self, req: StopRun) -> None:
        control = self._controls.get(req.run_id)
        if control is not None:
            control.stop.set()

    async def on_child_ended(self, notice: ChildEnded) -> None:
        await self.resume_parent(notice.parent_id)

    async def resume_parent(self, parent_id: str) -> None:
        """Resume a parent parked for its sub-agents, if they have all ended (exactly one
        replica wins the claim)."""
        sent = self.leases.clock()
        if await self.store.claim_waiting(parent_id, self.owner, self.settings.lease_s):
            self._spawn(await self.store.load(parent_id), leased_at=sent, helpers_done=True)

    async def on_decision(self, decided: ApprovalDecided) -> None:
        """A decision arrived (any replica may get it): resume the parked run here, but
        only with a decision the approvals service signed for the approval the run waits
        on (`approval.decision_problem`); any other is refused and the run stays parked."""
        sent = self.leases.clock()
        if not await self.store.claim_parked(decided.run_id, self.owner, self.settings.lease_s):
            return
        state = await self.store.load(decided.run_id)
        problem = decision_problem(self.decision_key, state, decided)
        if problem is not None:
            await self._refuse_decision(state, decided, problem)
            return
        decision = Decision(decided.approval_id, decided.decision, decided.note, decided.decided_by)
        self._spawn(state, decision, leased_at=sent)

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
            stored = await self.loop.parking.approvals.stored_decision(run_id, str(approval_id))
        except TetherError as exc:
            log.warning("cannot read approval %s back: %s", approval_id, exc.message)
            return
        if stored is not None and decision_problem(self.decision_key, state, stored) is None:
            await self.on_decision(stored)

    async def queue_message(self, req: QueueMessage, who: Principal) -> RunAccepted:
        await self.authorize(who, "runs.message", req.run_id)
        status = await self.store.queue_message(req.run_id, req.text)
        return RunAccepted(run_id=req.run_id, status=status)

    async def read_output(self, run_id: str, ref: str, offset: int) -> OutputContent:
        """One page of an output `run_id` made (the caller has authorised the run)."""
        query = GetOutput(ref=ref, run_id=run_id, offset=offset, limit=MAX_INLINE_BYTES)
        return await self.bus.request(self.bus.subjects.output_get, query, timeout=30.0)

    async def output_bytes(
        self, run_id: str, ref: str, first: OutputContent
    ) -> AsyncIterator[bytes]:
        """The output's bytes, page by page from `first` on."""
        page = first
        while True:
            data = page.content.encode() if page.encoding == "utf-8" else b64decode(page.content)
            yield data
            if page.eof or not data:
                return
            page = await self.read_output(run_id, ref, page.offset + len(data))

    async def follow(self, run_id: str, who: Principal) -> None:
        """Before a stream of the run's events starts: `who` may read the run."""
        await self.authorize(who, "runs.read", run_id)

    async def events(
        self, run_id: str, after: int, *, idle_s: float | None = None
    ) -> AsyncIterator[RunEvent]:
        """The run's events after `after`, live until `run.end` (the caller has passed
        `follow` first), or until `idle_s` of silence from a live run when given. An
        ended run whose last events never reached the stream (its publish failed after
        the committed end) has them read from its journal."""
        subject = self.bus.subjects.run_events(run_id)
        replay = (
            self.bus.replay(subject) if idle_s is None else self.bus.replay(subject, idle_s=idle_s)
        )
        async for data in replay:
            if data is None:
                status, _ = await self.store.status(run_id)
                if status in TERMINAL_STATUSES:
                    for row in await self.store.events(run_id, after):
                        yield RunEvent.model_validate(row)
                    return
                if idle_s is not None:
                    return
                continue
            event = decode(RunEvent, data)
            if event.seq > after:
                after = event.seq
                yield event
            if event.kind == "run.end":
                return

    # ---- shutdown ----------------------------------------------------------------

    async def close(self) -> None:
        """Graceful: every run stops at its next boundary and is handed back for another
        replica to continue at once; what does not finish in time is cancelled (its lease
        then expires and it is taken over)."""
        if self._maintainer is not None:
            self._maintainer.cancel()
            await asyncio.gather(self._maintainer, *self._fenced, return_exceptions=True)
        held = dict(self._tasks)
        for control in self._controls.values():
            control.handback.set()
        if held:
            _, pending = await asyncio.wait(held.values(), timeout=self.settings.drain_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*held.values(), return_exceptions=True)
        for run_id in held:
            await self.store.release(run_id, self.owner)
