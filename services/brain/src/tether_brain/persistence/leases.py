"""The lease SQL of runs: renewal, takeover of orphans, the claims that resume a parked
run (exactly one replica wins each; the winner gets the run loaded), and hand-back.
Leases use the database clock (`now()`), so replicas need not agree on time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.queries import rebuilt
from tether_brain.persistence.raw import DRIVER_ERRORS, database_error, driver_of
from tether_brain.persistence.tables import runs
from tether_brain.state.run import RunState
from tether_common.messages.runs import LIVE_STATUSES, PARKED_STATUSES, TERMINAL_STATUSES

# The status sets as bound parameters of the raw SQL (one declaration, in messages.runs).
LIVE = sorted(LIVE_STATUSES)
STATUS_SETS = {"terminal": sorted(TERMINAL_STATUSES), "parked": sorted(PARKED_STATUSES)}
# A claim of a run whose lease the claiming replica itself let lapse (a stall, not a crash;
# a hand-back clears the owner, so it never matches), forgiven unless it stalls too often.
# (`:me` is the owner again, typed apart: the SET's `:owner` is deduced as varchar.)
_OWN_LAPSE = "lease_owner = CAST(:me AS text) AND run_id <> ALL(CAST(:stalling AS text[]))"


# The lease renewal, in asyncpg's form. It locks the rows in run_id order, as a group
# commit does (`grouped.GroupCommit`), so the two never deadlock; a row a commit has just
# released (or fenced) is skipped, its conditions checked again once its lock is ours.
RENEW_SQL = (
    "UPDATE runs SET lease_expires_at = now() + make_interval(secs => $1) "
    "FROM (SELECT run_id FROM runs WHERE lease_owner = $2 AND status = ANY($3::text[]) "
    "AND lease_expires_at > now() AND run_id = ANY($4::text[]) "
    "ORDER BY run_id FOR UPDATE) AS mine "
    "WHERE runs.run_id = mine.run_id RETURNING runs.run_id"
)

# Every claim of a parked run: running, leased to `:owner`, the fence moved on.
_CLAIM = (
    "UPDATE runs SET status = 'running', lease_owner = :owner, "
    "lease_expires_at = now() + make_interval(secs => :s), fence = fence + 1"
)


@dataclass(frozen=True, slots=True)
class Orphan:
    """A run taken over: who held it, and how long before the claim its lease had ended
    (None: it had none, a hand-back)."""

    run_id: str
    held_by: str | None
    lapsed_s: float | None


class RunLeases:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # The same pool; a connection taken through this one runs each statement alone.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def renew(self, owner: str, lease_s: float, held: list[str]) -> list[str]:
        """Renew the leases of the runs this replica is still advancing (a run whose task
        died lets its lease lapse, so it is taken over); the runs renewed. Only a lease
        still running is extended: one that ran out stays out, even if nobody has
        claimed the run yet, since its holder may already have been fenced. One prepared
        statement in autocommit, on the asyncpg connection (`raw`)."""
        if not held:
            return []
        async with self._autocommit.connect() as conn:
            driver = await driver_of(conn)
            try:
                rows = await driver.fetch(RENEW_SQL, lease_s, owner, LIVE, held)
            except DRIVER_ERRORS as exc:
                raise await database_error(conn, driver, RENEW_SQL, exc) from exc
        return [r["run_id"] for r in rows]

    async def claim_orphans(
        self, owner: str, lease_s: float, limit: int, stalling: Sequence[str] = ()
    ) -> list[Orphan]:
        """Take over live runs whose lease expired (their replica died or froze); each
        with who held it and how long before the claim its lease had ended, by the
        database's clock (what a takeover's log says, and what tells a stall apart from
        a clock that disagrees).

        `takeovers` counts the claims at one step that may follow a crash (the loop ends
        a run taken over too often `repeated_crash`): a claim from another replica, or a
        lapsed hand-back. A replica taking back a run whose lease it let lapse itself (it
        stalled past the lease and fenced the run) is alive, so that claim is not counted,
        unless the run is in `stalling` (this replica has stalled on it too often: a run
        that stalls whoever holds it still ends)."""
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                text(
                    "UPDATE runs SET lease_owner = :owner, "
                    "lease_expires_at = now() + make_interval(secs => :s), fence = fence + 1, "
                    f"takeovers = CASE WHEN {_OWN_LAPSE} THEN takeovers "
                    "WHEN last_takeover_step = step THEN takeovers + 1 ELSE 1 END, "
                    f"last_takeover_step = CASE WHEN {_OWN_LAPSE} THEN last_takeover_step "
                    "ELSE step END "
                    "FROM (SELECT run_id AS orphan_id, lease_owner AS held_by, "
                    "EXTRACT(EPOCH FROM now() - lease_expires_at) AS lapsed_s FROM runs "
                    "WHERE status = ANY(:live) "
                    "AND (lease_expires_at IS NULL OR lease_expires_at < now()) "
                    "ORDER BY lease_expires_at NULLS FIRST LIMIT :limit FOR UPDATE SKIP LOCKED"
                    ") AS was WHERE runs.run_id = was.orphan_id "
                    "RETURNING runs.run_id, was.held_by, was.lapsed_s"
                ),
                {
                    "owner": owner,
                    "me": owner,
                    "s": lease_s,
                    "limit": limit,
                    "live": LIVE,
                    "stalling": list(stalling),
                },
            )
            return [
                Orphan(r.run_id, r.held_by, None if r.lapsed_s is None else float(r.lapsed_s))
                for r in rows
            ]

    async def next_lapse_s(self, owner: str) -> float | None:
        """Seconds until the earliest lease of another replica's live run runs out (by the
        database clock; negative if one already has), None if no other replica holds one:
        the adoption sweep wakes then instead of a whole sweep period later."""
        async with self.engine.connect() as conn:
            left = await conn.scalar(
                text(
                    "SELECT EXTRACT(EPOCH FROM min(lease_expires_at) - now()) FROM runs "
                    "WHERE status = ANY(:live) AND lease_owner IS DISTINCT FROM :owner "
                    "AND lease_expires_at IS NOT NULL"
                ),
                {"owner": owner, "live": LIVE},
            )
        return None if left is None else float(left)

    async def _claim(self, run_id: str, owner: str, lease_s: float, condition: str) -> Any:
        """Take a parked run for this replica (status running, a new lease, the fence moved
        on) if `condition` still holds; exactly one replica wins. One statement in
        autocommit: one round trip, durable when it answers. Returns the claimed row as
        it now stands, or None."""
        async with self._autocommit.connect() as conn:
            return await self._claim_on(conn, run_id, owner, lease_s, condition)

    async def _claim_on(
        self, conn: AsyncConnection, run_id: str, owner: str, lease_s: float, condition: str
    ) -> Any:
        claim = text(f"{_CLAIM} WHERE run_id = :run_id AND {condition} RETURNING *")
        result = await conn.execute(
            claim.columns(*runs.c),
            {"owner": owner, "s": lease_s, "run_id": run_id} | STATUS_SETS,
        )
        return result.first()

    async def _claim_state(
        self, run_id: str, owner: str, lease_s: float, condition: str
    ) -> RunState | None:
        """Claim (as `_claim`) and load the run on one connection: the claim's answer is
        the run row, so only its journal is read after it, two round trips in all
        (instead of a transaction for the claim and another for the load). The journal is
        read once the claim has committed, never in the claim's own statement: that one
        would see the journal from before any commit the claim had to wait for; and with
        the run ours, nothing is written to it meanwhile."""
        async with self._autocommit.connect() as conn:
            row = await self._claim_on(conn, run_id, owner, lease_s, condition)
            return None if row is None else await rebuilt(conn, row)

    async def claim_parked(self, run_id: str, owner: str, lease_s: float) -> RunState | None:
        """Take a run parked for approval to resume it, loaded; None if it is not parked
        (already resumed by another replica, or a replayed decision)."""
        return await self._claim_state(run_id, owner, lease_s, "status = 'awaiting_approval'")

    async def claim_waiting(self, run_id: str, owner: str, lease_s: float) -> RunState | None:
        """Take a parent parked for its sub-agents once none of them is live any more,
        loaded (None: not parked so, or a helper still live)."""
        return await self._claim_state(
            run_id,
            owner,
            lease_s,
            "status = 'awaiting_agents' AND NOT EXISTS (SELECT 1 FROM runs c WHERE "
            "c.parent_id = :run_id AND c.status <> ALL(:terminal))",
        )

    async def claim_parked_to_stop(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take a parked run (approval or sub-agents) so it can be ended as stopped."""
        return await self._claim(run_id, owner, lease_s, "status = ANY(:parked)") is not None

    async def release(self, run_id: str, owner: str) -> None:
        """Hand a run back (graceful shutdown): another replica may claim it at once."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.lease_owner == owner)
                .values(lease_owner=None, lease_expires_at=None)
            )
