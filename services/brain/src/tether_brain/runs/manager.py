"""Runs as the client sees them: start, read, list, stop and message a run, follow its
events. The façade over the brain's run machinery: who may (`access`), the task group
(`tasks`), putting runs in motion (`advancing`), lease maintenance (`maintenance`) and
the event and output streams (`streaming`)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from tether_brain.agents.config import BUDGET_FIELDS, Agents
from tether_brain.agents.quotas import Quotas
from tether_brain.agents.templated import templated
from tether_brain.agents.typed import pinned_output
from tether_brain.persistence.store import RunStore
from tether_brain.runs.access import Access, Use
from tether_brain.runs.advancing import Runner
from tether_brain.runs.streaming import Streams
from tether_brain.runs.tasks import RunTasks
from tether_brain.settings import BrainSettings
from tether_brain.state.kills import RunScope
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_common.bus import Bus
from tether_common.errors import ErrorCode, MessageError
from tether_common.identity import Principal
from tether_common.messages.agents import ModelChoice
from tether_common.messages.runs import (
    PARKED_STATUSES,
    TERMINAL_STATUSES,
    ChildEnded,
    ListRuns,
    QueueMessage,
    RunAccepted,
    RunList,
    RunSummary,
    RunView,
    StartRun,
    StopRun,
)
from tether_common.metrics import runs_started
from tether_common.traces import traceparent

log = logging.getLogger(__name__)


class RunManager:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        agents: Agents,
        tasks: RunTasks,
        runner: Runner,
        settings: BrainSettings,
    ) -> None:
        self.bus = bus
        self.store = store
        self.agents = agents
        self.tasks = tasks
        self.runner = runner
        self.settings = settings
        self.access = Access(store, agents, provider=settings.provider, model=settings.model)
        # Checked in the transaction that stores a run (429 `quota_exceeded`).
        self.quotas = Quotas(store.engine, agents)
        self.streams = Streams(bus, store)
        # The routes' names for what the parts own.
        self.authorize = self.access.authorize
        self.events = self.streams.events
        self.live = self.streams.live
        self.read_output = self.streams.read_output
        self.output_bytes = self.streams.output_bytes
        self.on_decision = runner.on_decision

    async def start(self, req: StartRun, who: Principal) -> RunAccepted:
        state = self.prepare(req, who)
        sent = self.tasks.leases.clock()
        await self.store.create(
            state, owner=self.tasks.owner, lease_s=self.settings.lease_s, admit=self.quotas.admit
        )
        self.launch(state, leased_at=sent)
        return RunAccepted(run_id=state.run_id, status=state.status)

    def prepare(self, req: StartRun, who: Principal) -> RunState:
        """A new run as `who` may start it (403/404/422 otherwise; 409 `killed` while a
        kill switch covers it), not yet stored: leased to this replica once `store.create`
        commits it (admitted by the quotas there: 429 `quota_exceeded`), then `launch`ed."""
        use = self.access.check_use(who, req)
        self.runner.kills.refuse(
            RunScope(who.tenant, agent_tenant=use.agent[0], agent=use.agent[1])
        )
        provider, model = use.provider, use.model
        # The agent's budget defaults fill what the request leaves open; its ceilings cap.
        asked = req.model_dump(include=set(BUDGET_FIELDS))
        budget = self.agents.budgets(use.config, asked)
        if budget["max_tokens"] is not None and provider not in self.settings.usage_providers:
            raise MessageError(
                f"max_tokens cannot be enforced: provider '{provider}' does not report token usage",
                code=ErrorCode.LIMIT_UNENFORCEABLE,
            )
        now = datetime.now(UTC)
        options = RunOptions.model_validate(
            req.model_dump(
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
            | {"agent_tenant": use.agent[0]}  # this very agent for its every later lookup
            | {"fallback": self._fallback(use, budget["max_tokens"])}
            | {"started_by": (who.name, who.role)}  # whom retrieval reads for
            # Its instructions and prefetch, filled now for the whole run.
            | templated(
                use.config, started=now, caller=who.name, agent=use.agent[1], tenant=who.tenant
            )
            | pinned_output(use.config, req.output_schema)  # typed answers, if any
        )
        return RunState(
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
            trace_parent=traceparent(),  # the request starting it: every segment's parent
        )

    def _fallback(self, use: Use, max_tokens: int | None) -> tuple[ModelChoice, ...]:
        """The chain the run may fall back on: under a `max_tokens` limit, only models
        whose provider reports usage (the limit could not be enforced on the others)."""
        usage = self.settings.usage_providers
        return tuple(c for c in use.fallback if max_tokens is None or c.provider in usage)

    def launch(self, state: RunState, *, leased_at: float) -> None:
        """Put a stored run in motion on this replica (its lease counted from `leased_at`,
        read before the commit that made it)."""
        runs_started.add(1, {"provider": state.provider})
        self.runner.advance(state, leased_at=leased_at)

    async def get(self, run_id: str, who: Principal) -> RunView:
        await self.access.authorize(who, "runs.read", run_id)
        state = await self.store.load(run_id)
        return RunView(
            run_id=state.run_id,
            status=state.status,
            stop_reason=state.stop_reason,
            prompt=state.prompt,
            answer=state.answer,
            output=state.output,
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
            owned = self.agents.owned_by(who.tenant, who.name)
        rows = await self.store.queries.listing(
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
        await self.access.authorize(who, "runs.stop", req.run_id)
        return await self._stop(req)

    async def _stop(self, req: StopRun) -> RunAccepted:
        """Durable request (any replica that holds or later adopts the run sees it), and a
        broadcast so the holder stops at its next boundary, cancelling a model stream.
        A parked run is ended here; every descendant is stopped too."""
        status = await self.store.request_stop(req.run_id)
        if status in TERMINAL_STATUSES:
            return RunAccepted(run_id=req.run_id, status=status)
        for child_id in await self.store.queries.live_children(req.run_id):
            await self._stop(StopRun(run_id=child_id))
        sent = self.tasks.leases.clock()
        if status in PARKED_STATUSES and await self.store.leases.claim_parked_to_stop(
            req.run_id, self.tasks.owner, self.settings.lease_s
        ):
            self.runner.advance(await self.store.load(req.run_id), leased_at=sent, stopping=True)
        else:
            await self.bus.publish(self.bus.subjects.run_stopping, req)
        return RunAccepted(run_id=req.run_id, status=status)

    async def on_stop_broadcast(self, req: StopRun) -> None:
        control = self.tasks.control(req.run_id)
        if control is not None:
            control.halt()

    async def on_child_ended(self, notice: ChildEnded) -> None:
        await self.runner.resume_parent(notice.parent_id)

    async def queue_message(self, req: QueueMessage, who: Principal) -> RunAccepted:
        await self.access.authorize(who, "runs.message", req.run_id)
        status = await self.store.queue_message(req.run_id, req.text)
        return RunAccepted(run_id=req.run_id, status=status)

    async def follow(self, run_id: str, who: Principal) -> None:
        """Before a stream of the run's events starts: `who` may read the run."""
        await self.access.authorize(who, "runs.read", run_id)

    async def close(self) -> None:
        """Hand every run back (the service has stopped taking messages first)."""
        await self.tasks.hand_back()
