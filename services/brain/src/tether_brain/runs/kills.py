"""The kill switch: an admin stops every running run of a tenant, of one agent, or all
of them, and no run in scope starts until the kill is lifted.

A kill is a row of `kills` (`persistence.kills`), written in the transaction of its
record in the `policy` audit trail, so it survives restarts and a change that could not
be audited is not made. Every replica holds the kills in force (`state.kills.Kills`):
the one that sets or lifts a kill re-reads them at once and broadcasts
`kills.changed`; the others re-read on that notice, and every replica re-reads them
with its lease sweep (`maintenance`), so one that missed the notice is behind by a
third of a lease at most. A brain reads them before it serves.

Each read stops what the kills cover on this replica: the runs advancing here are told
to stop (`killed`) at their next boundary (a model stream is cut at once; a tool call
in flight finishes first), and the parked runs they cover, which no task holds, are
claimed (exactly one replica wins each) and ended the same way, their approvals
withdrawn. Starts are refused (`RunManager.prepare`), and a run put in motion here for
any other reason (a takeover, a decision, its helpers' end, a new child) only stops
(`Runner.advance`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.config import Agents
from tether_brain.agents.records import record_change
from tether_brain.persistence.kills import KillStore, Target
from tether_brain.persistence.store import RunStore
from tether_brain.runs.advancing import Runner
from tether_brain.runs.tasks import RunTasks
from tether_brain.state.kills import KILLED, Kills
from tether_common.bus import Bus
from tether_common.errors import NotFoundError
from tether_common.identity import Principal
from tether_common.messages.kills import (
    KillList,
    KillRequest,
    KillsChanged,
    KillTarget,
    KillView,
    LiftRequest,
)

log = logging.getLogger(__name__)

PARKED_BATCH = 500  # parked runs ended per read (the next read ends the rest)
LISTED = 200  # kills in one listing


class KillSwitch:
    def __init__(
        self,
        engine: AsyncEngine,
        bus: Bus,
        agents: Agents,
        kills: Kills,
        runs: RunStore,
        tasks: RunTasks,
        runner: Runner,
        *,
        lease_s: float,
    ) -> None:
        self.engine = engine
        self.store = KillStore(engine)
        self.bus = bus
        self.agents = agents
        self.kills = kills
        self.runs = runs
        self.tasks = tasks
        self.runner = runner
        self.lease_s = lease_s

    # ---- the API -------------------------------------------------------------------

    async def kill(self, req: KillRequest, who: Principal) -> tuple[KillView, bool]:
        """Set a kill (admins): the one in force on that target and whether it is new.
        An existing one is left as it was, and what it covers is stopped again here."""
        who.require("kill.manage")
        target = self._target(req, who)
        async with self.engine.begin() as conn:
            view, made = await self.store.set(conn, target, req.reason, who.label)
            if made:  # in the kill's transaction: a kill that could not be audited is not set
                await record_change(
                    conn,
                    "kill.set",
                    _resource(view),
                    None,
                    _record(view),
                    who.label,
                    tenant=view.tenant,
                    sink=None,
                )
        if made:
            log.warning("kill switch %s set on %s by %s", view.kill_id, _resource(view), who.label)
        await self.refresh()
        if made:
            await self._announce(view.kill_id)
        return view, made

    async def lift(self, req: LiftRequest, who: Principal) -> KillView:
        """Lift the kill in force on the target (admins); 404 if there is none. Runs it
        stopped stay stopped; new ones may start again."""
        who.require("kill.manage")
        target = self._target(req, who)
        async with self.engine.begin() as conn:
            lifted = await self.store.lift(conn, target, req.reason, who.label)
            if lifted is None:
                raise NotFoundError(f"no kill switch is in force on {_describe(target)}")
            before, after = lifted
            await record_change(
                conn,
                "kill.lifted",
                _resource(after),
                _record(before),
                _record(after),
                who.label,
                tenant=after.tenant,
                sink=None,
            )
        log.warning("kill switch %s lifted by %s", after.kill_id, who.label)
        await self.refresh()
        await self._announce(after.kill_id)
        return after

    async def listing(self, who: Principal, *, lifted: bool) -> KillList:
        """The kills in force (with `lifted`, the record of lifted ones too), newest first:
        every one for an admin, for others the ones that apply to their tenant."""
        reach = who.reach("kill.read")
        found = await self.store.listing(lifted=lifted, limit=LISTED, tenant=reach.tenant)
        return KillList(kills=found)

    def _target(self, req: KillTarget, who: Principal) -> Target:
        """The stored target: an agent kill's tenant is the caller's unless named, and
        the agent must be one (a typo would otherwise kill nothing, silently)."""
        if req.scope != "agent":
            return (req.scope, req.tenant, None)
        tenant = req.tenant or who.tenant
        assert req.agent is not None  # the request's validator
        if (tenant, req.agent) not in self.agents.configs:
            raise NotFoundError(f"no agent '{req.agent}' in tenant '{tenant}'")
        return ("agent", tenant, req.agent)

    # ---- in force on this replica --------------------------------------------------

    async def refresh(self) -> None:
        """Read the kills in force and stop what they cover here (see the module)."""
        self.kills.replace(await self.store.in_force())
        if not self.kills.active:
            return
        told = self.tasks.halt(self.kills.covers, KILLED)
        if told:
            log.warning("kill switch: %d runs advancing here told to stop", len(told))
        parked = await self.store.parked_in_scope(self.kills.active, PARKED_BATCH)
        ended = await asyncio.gather(*(self._end_parked(r) for r in parked), return_exceptions=True)
        for run_id, outcome in zip(parked, ended, strict=True):
            if isinstance(outcome, Exception):  # a later read tries again
                log.warning("kill switch: parked run %s not ended: %r", run_id, outcome)

    async def _end_parked(self, run_id: str) -> None:
        sent = self.tasks.leases.clock()
        if not await self.runs.leases.claim_parked_to_stop(run_id, self.tasks.owner, self.lease_s):
            return  # another replica, or a decision, took it first
        # Claimed: if the load fails the lease lapses and whoever adopts it stops it.
        self.runner.advance(await self.runs.load(run_id), leased_at=sent, stopping=True)

    async def on_changed(self, _notice: KillsChanged) -> None:
        await self.refresh()

    async def _announce(self, kill_id: int) -> None:
        try:
            await self.bus.publish(self.bus.subjects.kills_changed, KillsChanged(kill_id=kill_id))
        except Exception as exc:  # every replica's sweep still reads it within a third of a lease
            log.warning("could not announce kill switch %s: %s", kill_id, exc)


def _resource(view: KillView) -> str:
    """How the audit trail names a kill's target."""
    return _describe((view.scope, view.tenant, view.agent))


def _describe(target: Target) -> str:
    scope, tenant, agent = target
    if scope == "all":
        return "kill:all"
    return f"kill:{tenant}" if scope == "tenant" else f"kill:{tenant}/{agent}"


def _record(view: KillView) -> dict[str, Any]:
    """What the audit's digest covers: the kill's row, reason and all."""
    return view.model_dump(mode="json", exclude={"version"})
