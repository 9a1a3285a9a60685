"""Reading runs without holding them: listings within a caller's reach, who a run
belongs to, its status, its children and parents ready to resume, its stored events; and
a run's state rebuilt from its row and journal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.tables import journal, runs, state_of
from tether_brain.state.run import DEFAULT_AGENT, RunState
from tether_common.errors import NotFoundError
from tether_common.identity import RowFilter
from tether_common.messages.runs import TERMINAL_STATUSES

EVERY_RUN = RowFilter(None, None)
LISTED_PROMPT_CHARS = 200


async def rebuilt(conn: AsyncConnection, row: Any) -> RunState:
    """A run's state from its row and its journal (every entry but events, which history
    does not need), read on `conn`."""
    entries = await conn.execute(
        select(journal.c.kind, journal.c.data)
        .where(journal.c.run_id == row.run_id, journal.c.kind != "event")
        .order_by(journal.c.seq)
    )
    state = state_of(row)
    for kind, data in entries:
        state.replay(kind, data)
    return state


class RunQueries:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def listing(
        self,
        *,
        status: str | None,
        parent_id: str | None,
        before: datetime | None,
        limit: int,
        agent: str | None = None,
        since: datetime | None = None,
        scope: RowFilter = EVERY_RUN,
        owned_agents: Sequence[str] = (),
    ) -> list[Any]:
        """Run rows for a listing, newest first (the `created_at` index), within `scope`:
        its tenant, and (when it names an owner) the runs that owner started or whose
        agent (`options.agent`) is one of `owned_agents`."""
        run_agent = func.coalesce(runs.c.options["agent"].astext, DEFAULT_AGENT)
        query = select(
            runs.c.run_id,
            runs.c.status,
            runs.c.stop_reason,
            func.left(runs.c.prompt, LISTED_PROMPT_CHARS).label("prompt"),
            runs.c.provider,
            runs.c.model,
            runs.c.step,
            runs.c.parent_id,
            run_agent.label("agent"),
            runs.c.created_at,
            runs.c.updated_at,
            runs.c.tenant,
            runs.c.owner,
        )
        if scope.tenant is not None:
            query = query.where(runs.c.tenant == scope.tenant)
        if scope.owner is not None:
            mine = runs.c.owner == scope.owner
            if owned_agents:
                mine = or_(mine, runs.c.options["agent"].astext.in_(list(owned_agents)))
            query = query.where(mine)
        if status is not None:
            query = query.where(runs.c.status == status)
        if parent_id is not None:
            query = query.where(runs.c.parent_id == parent_id)
        if agent is not None:
            query = query.where(run_agent == agent)
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        if before is not None:
            query = query.where(runs.c.created_at < before)
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).all())

    async def belongs(self, run_id: str) -> tuple[str, str | None, str | None]:
        """(tenant, owner, agent) of a run, for an authorisation check before anything
        else is read (`not_found` when there is no such run)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs.c.tenant, runs.c.owner, runs.c.options["agent"].astext).where(
                        runs.c.run_id == run_id
                    )
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row[0]), row[1], row[2]

    async def status(self, run_id: str) -> tuple[str, bool]:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs.c.status, runs.c.stop_requested).where(runs.c.run_id == run_id)
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row.status), bool(row.stop_requested)

    async def parents_ready(self, limit: int = 50) -> list[str]:
        """Parents parked for sub-agents that have all ended (a lost notice is caught here)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT p.run_id FROM runs p WHERE p.status = 'awaiting_agents' AND NOT EXISTS "
                    "(SELECT 1 FROM runs c WHERE c.parent_id = p.run_id AND c.status "
                    "<> ALL(:terminal)) LIMIT :limit"
                ),
                {"limit": limit, "terminal": sorted(TERMINAL_STATUSES)},
            )
            return [r.run_id for r in rows]

    async def children(self, run_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(runs.c.run_id).where(runs.c.parent_id == run_id))
            return [r.run_id for r in rows]

    async def live_children(self, run_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(runs.c.run_id).where(
                    runs.c.parent_id == run_id, runs.c.status.not_in(TERMINAL_STATUSES)
                )
            )
            return [r.run_id for r in rows]

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """A run's stored events with `seq` above `after`, oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(journal.c.data)
                .where(journal.c.run_id == run_id, journal.c.kind == "event")
                .order_by(journal.c.seq)
            )
            return [data for (data,) in rows if int(data["seq"]) > after]
