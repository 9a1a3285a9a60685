"""The scheduler every brain replica runs: every `poll_s` (jittered, so replicas do not
poll in step) it looks for due schedules and claims each in its own transaction
(`ScheduleStore.claim`), where it decides (`plan`), starts the run, records the firing
and advances the schedule, all in one commit; then it sets the run going here.

Exactly once across replicas: the claim is the row lock taken with `SKIP LOCKED` and the
due condition re-read under it; the firing's key (schedule, tick) refuses a second run
for one tick; `next_fire_at` moves past the tick in the same commit. A replica killed
before the commit leaves the tick due (the transaction is rolled back with its
connection); one killed after leaves a stored run leased to it, which another replica
adopts when the lease runs out (`runs/maintenance.py`), as for any run.

As whom: a run starts as the schedule's principal as it stands at that tick, looked up
in the tick's transaction with its token's row locked for share (a revocation waits for
the commit, never slips between check and start), and checked as any run start is (its
role, limits, the agent, provider and model, kill switches, quotas). A principal that is
gone (revoked, expired, the bootstrap token unset) or may no longer start this run
pauses the schedule, with the reason, in the audit trail: its runs never go on with the
rights it had. A refusal that may pass (a kill switch, a quota) skips the tick.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from tether_brain.runs.manager import RunManager
from tether_brain.schedules.plan import Plan, plan
from tether_brain.schedules.store import ScheduleRow, ScheduleStore
from tether_brain.schedules.timing import due, timing_of
from tether_brain.state.run import RunState
from tether_common.background import FailureLog
from tether_common.errors import AuthError, NotFoundError, TetherError
from tether_common.identity import Principal
from tether_common.messages.runs import TERMINAL_STATUSES, StartRun

log = logging.getLogger(__name__)

BATCH = 50  # due schedules claimed per poll (the rest on the next one)
# Refusals that last: the principal may not (any more) start this run.
LASTING = (AuthError, NotFoundError)


class Holders(Protocol):
    """Who holds a token now (`TokenStore.holder`)."""

    async def holder(
        self, token_id: str | None, conn: AsyncConnection | None = None
    ) -> Principal | None: ...


@dataclass(frozen=True, slots=True)
class Started:
    state: RunState
    leased_at: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a tick's run start came to: the run (stored), or why the schedule was paused,
    or why the tick was skipped."""

    state: RunState | None = None
    paused: str | None = None
    refused: str | None = None


def start_request(values: Mapping[str, Any]) -> StartRun:
    """The run a schedule (its columns) starts; also what its writer is checked against."""
    return StartRun(
        prompt=values["prompt"],
        agent=values["agent"],
        provider=values["provider"],
        model=values["model"],
        **values["budgets"],
    )


class Scheduler:
    def __init__(
        self,
        store: ScheduleStore,
        runs: RunManager,
        holders: Holders,
        *,
        poll_s: float,
        grace_s: float,
    ) -> None:
        self.store = store
        self.runs = runs
        self.holders = holders
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._failures = FailureLog(log, "the scheduler")

    async def run_forever(self) -> None:
        """Poll until cancelled; a failing poll (PostgreSQL down) is logged, never fatal."""
        while True:
            try:
                await self.poll()
            except Exception as exc:
                self._failures.failed(exc)
            else:
                self._failures.recovered()
            await asyncio.sleep(self.poll_s * random.uniform(0.5, 1.5))

    async def poll(self) -> int:
        """Claim every due schedule once; returns how many runs were started."""
        started = 0
        for schedule_id in await self.store.due(BATCH):
            found = await self.fire(schedule_id)
            if found is not None:
                # Set going only after the commit: a run not stored is never started.
                self.runs.launch(found.state, leased_at=found.leased_at)
                started += 1
        return started

    async def fire(self, schedule_id: str) -> Started | None:
        """One claim of one schedule (None: nothing started, or another replica has it)."""
        leased_at = self.runs.tasks.leases.clock()  # read before the commit, as `start`
        async with self.store.claim(schedule_id) as claimed:
            if claimed is None:
                return None
            conn, row, now = claimed
            decided = self._plan(row, now)
            outcome = Outcome()
            if decided.fire is not None:
                outcome = await self._start(conn, row, decided)
            values = settled(row, decided, outcome, now)
            await self.store.settle(conn, row, values)
            if outcome.paused is not None:
                log.warning("schedule %s paused: %s", schedule_id, outcome.paused)
                await self.store.record_pause(conn, row, values, outcome.paused)
        if outcome.refused is not None:
            log.warning("schedule %s skipped a tick: %s", schedule_id, outcome.refused)
        if outcome.state is None:
            return None
        log.info("schedule %s started run %s", schedule_id, outcome.state.run_id)
        return Started(outcome.state, leased_at)

    def _plan(self, row: ScheduleRow, now: datetime) -> Plan:
        timing = timing_of(
            cron=row.cron, timezone=row.timezone, interval_s=row.interval_s, anchor=row.anchor
        )
        live = row.last_run_status is not None and row.last_run_status not in TERMINAL_STATUSES
        return plan(
            due=due(timing, row.next_fire_at, now),
            pending=row.pending_tick,
            busy=live,
            overlap=row.overlap,
            catch_up=row.catch_up,
            grace_s=self.grace_s,
            now=now,
        )

    async def _start(self, conn: AsyncConnection, row: ScheduleRow, decided: Plan) -> Outcome:
        """The tick's run, stored in the claim's transaction as its principal now may
        start it."""
        assert decided.fire is not None
        who = await self.holders.holder(row.run_as_token, conn)
        if who is None or who.name != row.run_as or who.tenant != row.tenant:
            return Outcome(paused=f"'{row.run_as}' no longer holds a valid token")
        try:
            state = self.runs.prepare(start_request(row.values), who)
            # A refusal at admission (a quota) rolls back this savepoint, not the claim.
            async with conn.begin_nested():
                await self.runs.store.create(
                    state,
                    owner=self.runs.tasks.owner,
                    lease_s=self.runs.settings.lease_s,
                    conn=conn,
                    admit=self.runs.quotas.admit,
                )
        except LASTING as exc:
            return Outcome(paused=f"'{row.run_as}' may not start it: {exc}")
        except TetherError as exc:
            return Outcome(refused=str(exc))
        await self.store.fired(conn, row, decided.fire, state.run_id, max(decided.covers, 1))
        return Outcome(state=state)


def settled(row: ScheduleRow, decided: Plan, outcome: Outcome, now: datetime) -> dict[str, Any]:
    """The schedule's row after a claim: its next tick, queue, counters, last run."""
    values: dict[str, Any] = {"pending_tick": decided.pending}
    if decided.next_fire_at is not None:
        values["next_fire_at"] = decided.next_fire_at
    skipped = decided.skipped
    if outcome.state is not None:
        values |= {
            "last_run_id": outcome.state.run_id,
            "last_tick_at": decided.fire,
            "fired": row.fired + 1,
            "last_error": None,
        }
    elif decided.fire is not None:
        skipped += max(decided.covers, 1)  # the tick that could not start its run
        values["last_error"] = outcome.paused or outcome.refused
    values["skipped"] = row.skipped + skipped
    if outcome.paused is not None:
        values |= {"enabled": False, "paused_reason": outcome.paused, "pending_tick": None}
        values |= {"changed_at": now, "version": row.version + 1}
    return values
