"""Which operators are watching: each live event stream is a row refreshed by heartbeat,
so every replica answers "is an approver connected for this agent/owner?" the same way."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.auth import Principal
from tether_approvals.persistence.tables import operator_sessions
from tether_common.identity import PERMISSIONS

# The roles that may decide an approval, so count as an approver being present.
DECIDERS = sorted(PERMISSIONS["approvals.decide"])


class PresenceBoard:
    def __init__(self, engine: AsyncEngine, ttl_s: float) -> None:
        self.engine = engine
        self.ttl_s = ttl_s

    @property
    def heartbeat_s(self) -> float:
        return self.ttl_s / 3

    async def join(self, who: Principal) -> str:
        session_id = f"ses_{uuid.uuid4().hex[:20]}"
        values: dict[str, Any] = {"session_id": session_id, "principal": who.name}
        values |= {
            "role": who.role,
            "agents": None if who.agents is None else sorted(who.agents),
            "owners": None if who.owners is None else sorted(who.owners),
            "seen_at": datetime.now(UTC),
        }
        async with self.engine.begin() as conn:
            await conn.execute(operator_sessions.insert().values(values))
        return session_id

    async def beat(self, session_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(operator_sessions)
                .where(operator_sessions.c.session_id == session_id)
                .values(seen_at=datetime.now(UTC))
            )

    async def leave(self, session_id: str, who: Principal | None = None) -> None:
        """End a session (given `who`: only one of `who`'s, so an id seen elsewhere
        cannot end another operator's presence)."""
        stmt = delete(operator_sessions).where(operator_sessions.c.session_id == session_id)
        if who is not None:
            stmt = stmt.where(operator_sessions.c.principal == who.name)
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def keep(self, who: Principal, session_id: str | None, *, beat: bool) -> str:
        """`who`'s session of a view polled through another service: a new one without
        `session_id`; with `beat`, renewed, or a new one when it is gone (pruned after
        an outage) or not `who`'s (a guessed id renews nobody else's presence)."""
        if session_id is None:
            return await self.join(who)
        if not beat:
            return session_id
        async with self.engine.begin() as conn:
            renewed = await conn.execute(
                update(operator_sessions)
                .where(
                    operator_sessions.c.session_id == session_id,
                    operator_sessions.c.principal == who.name,
                )
                .values(seen_at=datetime.now(UTC))
            )
        return session_id if renewed.rowcount else await self.join(who)

    async def approvers(self, agent: str | None, owner: str | None) -> int:
        """Live sessions whose role may decide and whose scope covers agent and owner."""
        since = datetime.now(UTC) - timedelta(seconds=self.ttl_s)
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(operator_sessions).where(
                    operator_sessions.c.seen_at > since,
                    operator_sessions.c.role.in_(DECIDERS),
                )
            )
            found = [
                Principal(
                    r.principal,
                    r.role,
                    agents=None if r.agents is None else frozenset(r.agents),
                    owners=None if r.owners is None else frozenset(r.owners),
                )
                for r in rows
            ]
        return sum(1 for who in found if who.covers(agent, owner))

    async def prune(self) -> None:
        """Forget sessions of processes that died without saying goodbye."""
        stale = datetime.now(UTC) - timedelta(seconds=self.ttl_s * 10)
        async with self.engine.begin() as conn:
            await conn.execute(delete(operator_sessions).where(operator_sessions.c.seen_at < stale))
