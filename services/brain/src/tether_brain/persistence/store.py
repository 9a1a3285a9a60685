"""Durable runs in PostgreSQL: creating a run, the one fenced commit per step (the run
row, its journal and audit records; the steps of the runs in flight grouped into shared
transactions by `grouped.GroupCommit`), the inbox of queued user messages, loading a run
back. Every commit is fenced by the lease token, so a replica that lost the run cannot
write after it. Lease SQL is `leases.RunLeases`, reads are `queries.RunQueries`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.commits import COMMIT_STEP, execute_step, step_write
from tether_brain.persistence.grouped import GroupCommit
from tether_brain.persistence.leases import RunLeases
from tether_brain.persistence.queries import RunQueries, rebuilt
from tether_brain.persistence.tables import inbox, row_values, runs
from tether_brain.state.run import RunState
from tether_common.errors import ConflictError, ErrorCode, NotFoundError
from tether_common.messages.runs import TERMINAL_STATUSES

__all__ = ["COMMIT_STEP", "Admit", "RunStore", "StorePort"]

# Decides on a run about to be inserted, in the inserting transaction (`RunStore.create`).
Admit = Callable[[AsyncConnection, RunState], Awaitable[None]]


class StatusPort(Protocol):
    async def status(self, run_id: str) -> tuple[str, bool]:
        """The run's status and whether a stop was asked; `NotFoundError` if none."""
        ...


class StorePort(Protocol):
    """Durable runs as the loop (and whoever starts its runs) uses them: the loop's seam
    onto PostgreSQL. `RunStore` is the real one; `tether_brain.testing.MemoryStore` keeps
    runs in memory, and tests/brain/contract holds both to the same cases."""

    @property
    def queries(self) -> StatusPort: ...

    async def create(self, state: RunState, *, owner: str, lease_s: float) -> None: ...

    async def commit(self, state: RunState) -> None: ...

    async def finish_unless_queued(
        self, state: RunState, finishing: Callable[[], None]
    ) -> list[str]: ...

    async def queue_message(self, run_id: str, message: str) -> str: ...

    async def load(self, run_id: str) -> RunState: ...

    async def request_stop(self, run_id: str) -> str: ...


class RunStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # The same pool; a connection taken through this one runs each statement alone.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.grouped = GroupCommit(self._autocommit.connect)
        self.leases = RunLeases(engine)
        self.queries = RunQueries(engine)

    async def create(
        self,
        state: RunState,
        *,
        owner: str,
        lease_s: float,
        conn: AsyncConnection | None = None,
        admit: Admit | None = None,
    ) -> None:
        """Insert the run's row, leased to `owner`; in `conn`'s transaction when given (a
        thread's turn commits its run with the turn). `admit` first, in that transaction:
        it may refuse the run (raise) or settle what is inserted (a quota's)."""
        if conn is None:
            async with self.engine.begin() as own:
                return await self.create(state, owner=owner, lease_s=lease_s, conn=own, admit=admit)
        if admit is not None:
            await admit(conn, state)
        limits = {k: v for k, v in asdict(state.limits).items() if k != "max_steps"}
        values = row_values(state) | {
            "run_id": state.run_id,
            "prompt": state.prompt,
            "provider": state.provider,
            "model": state.model,
            "max_steps": state.max_steps,
            "fence": state.fence,
            "options": state.options.stored(),
            "limits": limits,
            "created_at": state.created_at,
            "parent_id": state.parent_id,
            "depth": state.depth,
            "tenant": state.tenant,
            "owner": state.owner,
            "trace_parent": state.trace_parent,
            "lease_owner": owner,
            "lease_expires_at": func.now() + timedelta(seconds=lease_s),
        }
        await conn.execute(runs.insert().values(values))

    async def commit(self, state: RunState, conn: AsyncConnection | None = None) -> None:
        """Append the step's pending entries and the new counters in one fenced commit.
        A run that leaves the live states gives its lease up in the same commit.

        One statement: the fenced update of the run row, and the journal and audit
        inserts only if it matched. In `conn`'s transaction when given; else grouped
        with the other runs' steps committing at the same moment (`GroupCommit`): one
        round trip and one transaction for all of them, each fenced on its own."""
        write = step_write(state)
        found = await (self.grouped.commit(write) if conn is None else execute_step(conn, write))
        if found != 1:
            raise ConflictError(
                f"run {state.run_id} is no longer ours (fence {state.fence}, or its lease ran out)"
            )
        write.applied(state)

    async def finish_unless_queued(
        self, state: RunState, finishing: Callable[[], None]
    ) -> list[str]:
        """At an answer boundary: hand back queued user messages if any (the run goes on),
        else commit the ending. The run row is locked so a message queued at the same
        moment is either delivered or refused, never lost."""
        async with self.engine.begin() as conn:
            await conn.execute(
                select(runs.c.run_id).where(runs.c.run_id == state.run_id).with_for_update()
            )
            queued = (
                await conn.execute(
                    select(inbox.c.id, inbox.c.text)
                    .where(inbox.c.run_id == state.run_id, inbox.c.delivered.is_(False))
                    .order_by(inbox.c.id)
                )
            ).all()
            if queued:
                await conn.execute(
                    update(inbox)
                    .where(inbox.c.id.in_([r.id for r in queued]))
                    .values(delivered=True)
                )
                return [r.text for r in queued]
            finishing()
            await self.commit(state, conn)
            return []

    async def queue_message(self, run_id: str, message: str) -> str:
        """Queue a user message for a live run; returns the run's status."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(runs.c.status).where(runs.c.run_id == run_id).with_for_update()
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no run '{run_id}'")
            if row.status in TERMINAL_STATUSES:
                raise ConflictError(
                    f"run {run_id} has ended ({row.status})", code=ErrorCode.RUN_ENDED
                )
            await conn.execute(
                inbox.insert().values(run_id=run_id, text=message, created_at=datetime.now(UTC))
            )
            return str(row.status)

    async def load(self, run_id: str) -> RunState:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).first()
            if row is None:
                raise NotFoundError(f"no run '{run_id}'")
            return await rebuilt(conn, row)

    async def request_stop(self, run_id: str) -> str:
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.run_id == run_id)
                    .values(stop_requested=True)
                    .returning(runs.c.status)
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row.status)
