"""Schedules in PostgreSQL: their rows, every change a versioned write with a record in
the `schedules` audit trail (who, which schedule of which tenant, digests of before and
after) in the same transaction, and the claim the scheduler takes on a due schedule.

A claim (`claim`) is a transaction holding the schedule's row lock, taken with `SKIP
LOCKED` and only while the row is still due: a replica that finds it locked or no longer
due moves on. Everything a tick does (the run's row, the firing's row, the advanced
`next_fire_at`) commits in that one transaction, so two replicas never start one tick
and a replica killed before its commit leaves the tick due for the next one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, exists, func, insert, not_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.records import digest
from tether_brain.persistence import trail
from tether_brain.persistence.tables import runs
from tether_brain.schedules.tables import firings, schedules
from tether_common import audit
from tether_common.errors import ConflictError, ErrorCode, NotFoundError
from tether_common.identity import RowFilter
from tether_common.messages.runs import TERMINAL_STATUSES

SCHEDULES_TRAIL = "schedules"  # one hash chain for every schedule change, of every tenant

# What a change decides from the row as locked: the new values (None: delete the row).
Decide = Callable[["ScheduleRow"], dict[str, Any] | None]

# A run that has not ended: a schedule with `overlap` other than `allow` waits for it.
_LIVE = runs.c.status.not_in(sorted(TERMINAL_STATUSES))
_LAST_STATUS = (
    select(runs.c.status).where(runs.c.run_id == schedules.c.last_run_id).scalar_subquery()
)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule's row (`values`, by column) and its last run's status now."""

    values: dict[str, Any]
    last_run_status: str | None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def definition(self) -> dict[str, Any]:
        """What the audit digests: the schedule without what its firings change."""
        kept = {k: v for k, v in self.values.items() if k not in _RUNTIME}
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in kept.items()}


_RUNTIME = frozenset(
    {"next_fire_at", "pending_tick", "last_tick_at", "last_run_id", "fired", "skipped"}
    | {"last_error", "changed_at", "created_at", "anchor"}
)


def _row(found: Any) -> ScheduleRow:
    values = {c.name: getattr(found, c.name) for c in schedules.columns}
    return ScheduleRow(values, getattr(found, "last_status", None))


class ScheduleStore:
    def __init__(self, engine: AsyncEngine, *, sink: audit.JsonlSink | None = None) -> None:
        self.engine = engine
        self.sink = sink

    # ---- reading -----------------------------------------------------------------------

    async def find(self, schedule_id: str) -> ScheduleRow:
        query = select(schedules, _LAST_STATUS.label("last_status")).where(
            schedules.c.schedule_id == schedule_id
        )
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).first()
        if found is None:
            raise NotFoundError(f"no schedule '{schedule_id}'")
        return _row(found)

    async def listing(self, scope: RowFilter) -> list[ScheduleRow]:
        """The schedules of `scope`'s tenant (None: all), enabled ones soonest first."""
        query = select(schedules, _LAST_STATUS.label("last_status")).order_by(
            schedules.c.enabled.desc(), schedules.c.next_fire_at, schedules.c.schedule_id
        )
        if scope.tenant is not None:
            query = query.where(schedules.c.tenant == scope.tenant)
        async with self.engine.connect() as conn:
            return [_row(found) for found in await conn.execute(query)]

    # ---- changing ----------------------------------------------------------------------

    async def create(self, values: dict[str, Any]) -> ScheduleRow:
        async with self.engine.begin() as conn:
            await conn.execute(insert(schedules).values(values))
            made = ScheduleRow(values, None)
            await self._record(conn, "schedule.created", None, made, values["created_by"])
        return made

    async def change(
        self, schedule_id: str, who: str, event: str, decide: Decide, *, expected: int | None
    ) -> ScheduleRow | None:
        """Replace (or delete: `decide` answers None) the schedule as locked; 409
        `version_conflict` when `expected` is not its version. `decide` rules on the
        locked row, so who may is decided on what is changed, not on an earlier read."""
        async with self.engine.begin() as conn:
            found = (
                await conn.execute(
                    select(schedules)
                    .where(schedules.c.schedule_id == schedule_id)
                    .with_for_update()
                )
            ).first()
            if found is None:
                raise NotFoundError(f"no schedule '{schedule_id}'")
            current = _row(found)
            new = decide(current)  # may refuse (raise): rolled back with the transaction
            if expected is not None and current.version != expected:
                raise ConflictError(
                    f"schedule '{schedule_id}' is at version {current.version}, not {expected}",
                    code=ErrorCode.VERSION_CONFLICT,
                )
            where = schedules.c.schedule_id == schedule_id
            if new is None:
                await conn.execute(delete(schedules).where(where))
                await self._record(conn, event, current, None, who)
                return None
            new |= {"version": current.version + 1}
            await conn.execute(update(schedules).where(where).values(new))
            changed = ScheduleRow(current.values | new, current.last_run_status)
            await self._record(conn, event, current, changed, who)
        return changed

    async def _record(
        self,
        conn: AsyncConnection,
        event: str,
        before: ScheduleRow | None,
        after: ScheduleRow | None,
        who: str,
        *,
        reason: str | None = None,
    ) -> None:
        """One record in the `schedules` trail (never the prompt itself: its digest)."""
        either = after or before
        assert either is not None
        data: dict[str, Any] = {
            "resource": f"schedule:{either.schedule_id}",
            "tenant": either.tenant,
            "by": who,
            "before": None if before is None else digest(before.definition),
            "after": None if after is None else digest(after.definition),
        }
        if reason is not None:
            data["reason"] = reason
        await trail.record(conn, SCHEDULES_TRAIL, event, data, sink=self.sink)

    # ---- the scheduler's side --------------------------------------------------------

    async def due(self, limit: int) -> list[str]:
        """Schedules with a tick due now (by the database's clock, the one every replica
        shares), or a queued tick whose last run has ended; soonest first."""
        last_live = exists().where(runs.c.run_id == schedules.c.last_run_id, _LIVE)
        query = (
            select(schedules.c.schedule_id)
            .where(
                schedules.c.enabled,
                or_(
                    schedules.c.next_fire_at <= func.clock_timestamp(),
                    and_(schedules.c.pending_tick.is_not(None), not_(last_live)),
                ),
            )
            .order_by(schedules.c.next_fire_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [str(r.schedule_id) for r in await conn.execute(query)]

    @asynccontextmanager
    async def claim(
        self, schedule_id: str
    ) -> AsyncIterator[tuple[AsyncConnection, ScheduleRow, datetime] | None]:
        """A transaction holding the schedule's row lock, with the row and the database's
        time; None when another replica holds it or it is paused or gone."""
        async with self.engine.begin() as conn:
            found = (
                await conn.execute(
                    select(schedules, _LAST_STATUS.label("last_status"))
                    .where(schedules.c.schedule_id == schedule_id, schedules.c.enabled)
                    .with_for_update(skip_locked=True, of=schedules)
                )
            ).first()
            if found is None:
                yield None
                return
            now = (await conn.execute(select(func.clock_timestamp()))).scalar_one()
            yield conn, _row(found), now

    async def settle(self, conn: AsyncConnection, row: ScheduleRow, values: dict[str, Any]) -> None:
        """What a claim leaves: the schedule's next tick, queue and counters."""
        await conn.execute(
            update(schedules).where(schedules.c.schedule_id == row.schedule_id).values(values)
        )

    async def fired(
        self, conn: AsyncConnection, row: ScheduleRow, tick: datetime, run_id: str, covers: int
    ) -> None:
        """The firing's row: its key (schedule, tick) refuses a second run for one tick."""
        await conn.execute(
            insert(firings).values(
                schedule_id=row.schedule_id,
                tick_at=tick,
                run_id=run_id,
                covers=covers,
                fired_at=func.clock_timestamp(),
            )
        )

    async def record_pause(
        self, conn: AsyncConnection, row: ScheduleRow, values: dict[str, Any], reason: str
    ) -> None:
        """The audit record of a pause the scheduler made (its principal may no longer do
        what the schedule does), in the claim's transaction."""
        after = ScheduleRow(row.values | values, row.last_run_status)
        await self._record(conn, "schedule.paused", row, after, "scheduler", reason=reason)


__all__ = ["SCHEDULES_TRAIL", "Decide", "ScheduleRow", "ScheduleStore"]
