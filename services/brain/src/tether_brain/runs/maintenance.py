"""Lease maintenance, forever until cancelled: probe NATS, renew the leases of the runs
advancing here, fence the runs whose lease this replica cannot prove, adopt orphaned runs,
resume parents whose helpers have ended, and re-read the kill switches (every third of a
lease, so a replica that missed a kill's notice stops what it covers within a lease).

Fencing: a replica acts on a run only while it can prove its lease. Each lease is counted
from the moment the request that set it was sent (`leases.Leases`); once
`lease_s * (1 - lease_margin)` has passed without a renewal, the run's task is cancelled
and the run dropped from memory (nothing more is committed or published for it), before
any other replica may claim it. A replica that cannot reach NATS for `bus_loss_s` stops
renewing (it could not move its runs anyway), so they pass to one that can. The commit
itself is conditional on the lease in the database (`persistence.store.COMMIT_STEP`), so
a replica that was paused and wakes up late writes nothing."""

from __future__ import annotations

import asyncio
import logging

from tether_brain.persistence.store import RunStore
from tether_brain.runs.advancing import Runner
from tether_brain.runs.kills import KillSwitch
from tether_brain.runs.tasks import RunTasks
from tether_common.background import FailureLog, every
from tether_common.bus import Bus

log = logging.getLogger(__name__)

# Woken this long after a lease's end (so the database agrees it has ended), and never
# sooner again than this after a sweep that found a lease already out (a claim that lost
# to another replica's would otherwise spin).
LAPSE_GRACE_S = 0.02
# A sweep that woke late or took this share of a lease or more is logged (0.25 s of a 2 s
# lease): the takeover bound counts on the claim following the lapse within a sweep.
SLOW_SWEEP_SHARE = 1 / 8


class Maintenance:
    def __init__(
        self,
        bus: Bus,
        store: RunStore,
        tasks: RunTasks,
        runner: Runner,
        kill_switch: KillSwitch,
        *,
        lease_s: float,
        lease_margin: float,
        bus_loss_s: float,
    ) -> None:
        self.bus = bus
        self.store = store
        self.tasks = tasks
        self.runner = runner
        self.kill_switch = kill_switch
        self.lease_s = lease_s
        self.lease_margin = lease_margin
        self.bus_loss_s = bus_loss_s
        self._bus_seen = tasks.leases.clock()  # the last NATS round trip's send time

    async def run(self) -> None:
        """Separate loops, so a renewal stuck on a partition never delays the fence, nor a
        slow adoption the renewal."""
        quarter = self.lease_s / 4
        async with asyncio.TaskGroup() as group:
            group.create_task(every(quarter, self._probe_bus, FailureLog(log, "NATS probe")))
            group.create_task(every(quarter, self._renew, FailureLog(log, "lease renewal")))
            group.create_task(self._fencing())
            group.create_task(self._adoption())
            group.create_task(
                every(self.lease_s / 3, self.kill_switch.refresh, FailureLog(log, "kill switch"))
            )

    def bus_usable(self) -> bool:
        """NATS answered a round trip within `bus_loss_s`: runs held here can still move."""
        return self.tasks.leases.clock() - self._bus_seen < self.bus_loss_s

    async def _probe_bus(self) -> None:
        sent = self.tasks.leases.clock()
        await self.bus.round_trip(timeout=self.bus_loss_s)
        self._bus_seen = max(self._bus_seen, sent)

    async def _renew(self) -> None:
        """Extend the leases of the runs advancing here; none while NATS is lost (their
        leases lapse, they are fenced here and taken over by a replica that reaches it)."""
        held = self.tasks.held()
        if not held or not self.bus_usable():
            return
        sent = self.tasks.leases.clock()
        renewed = await asyncio.wait_for(
            self.store.leases.renew(self.tasks.owner, self.lease_s, held), self.lease_s
        )
        self.tasks.leases.renewed(renewed, sent)

    async def _fencing(self) -> None:
        """Fence every run whose hold may have lapsed, checked a few times per margin."""
        tick = self.lease_s * self.lease_margin / 4
        while True:
            if lapsed := self.tasks.leases.lapsed():
                nats = "reachable" if self.bus_usable() else "lost"
                self.tasks.fence(lapsed, why=f"left to another replica (NATS {nats})")
            await asyncio.sleep(tick)

    async def _adoption(self) -> None:
        """Sweep for orphaned runs every third of a lease, and also just after the
        earliest lease held elsewhere runs out: a replica that died is noticed when its
        leases lapse, not up to a sweep period later (the takeover bound is lease + sweep
        + 1 s; this takes the sweep out of it when the survivor's database answers)."""
        period = self.lease_s / 3
        failures = FailureLog(log, "run adoption")
        clock = self.tasks.leases.clock
        due = clock()
        while True:
            wait, woke = period, clock()
            try:
                left = await self._adopt()
            except Exception as exc:
                failures.failed(exc)
            else:
                failures.recovered()
                if left is not None:
                    wait = min(period, max(left + LAPSE_GRACE_S, LAPSE_GRACE_S))
            self._slow_sweep(late_s=woke - due, took_s=clock() - woke)
            due = clock() + wait
            await asyncio.sleep(wait)

    def _slow_sweep(self, *, late_s: float, took_s: float) -> None:
        """Say a sweep that delayed its claims by a noticeable share of a lease: woken late
        (this replica's event loop was stalled or starved: see the loop-lag warnings) or
        slow itself (the claim's and loads' round trips, a wait for a pooled connection)."""
        if late_s + took_s >= self.lease_s * SLOW_SWEEP_SHARE:
            log.warning(
                "adoption sweep woke %.2f s late and took %.2f s",
                late_s,
                took_s,
                extra={"sweep_late_s": round(late_s, 3), "sweep_took_s": round(took_s, 3)},
            )

    async def _adopt(self) -> float | None:
        """One sweep; the seconds until the next lease held elsewhere lapses, if any."""
        if not self.bus_usable():
            return None
        await self.runner.adopt_orphans()
        for parent_id in await self.store.queries.parents_ready():
            await self.runner.resume_parent(parent_id)
        return await self.store.leases.next_lapse_s(self.tasks.owner)
