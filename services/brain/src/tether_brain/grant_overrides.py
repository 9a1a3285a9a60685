"""Grant changes made through the policy API: kept in PostgreSQL (`agent_grants`) in the
same transaction as their audit records, and in force on every brain replica.

The replica that makes a change applies it at once and broadcasts `agents.grants_changed`;
the others reload on that notice. Every replica also reloads all changes every
`refresh_s`, so one that missed a notice (NATS was away) is behind for that long at most.
Changes to one agent are serialised by an advisory lock, so each audit record's
added/removed lists are against the grants really in force before it.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, MetaData, String, Table, select, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents import Agents
from tether_common.background import FailureLog, every
from tether_common.bus import Bus
from tether_common.messages.runs import GrantsChanged

log = logging.getLogger(__name__)

metadata = MetaData()

agent_grants = Table(
    "agent_grants",
    metadata,
    Column("agent_id", String(200), primary_key=True),
    Column("grants", JSONB, nullable=False),
    Column("changed_by", String(200), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)


def _lock_key(agent_id: str) -> int:
    digest = hashlib.sha256(f"tether-agent-grants:{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class GrantOverrides:
    def __init__(self, engine: AsyncEngine, agents: Agents, bus: Bus, *, refresh_s: float) -> None:
        self.engine = engine
        self.agents = agents
        self.bus = bus
        self.refresh_s = refresh_s
        self._changed: dict[str, list[str]] = {}

    async def load(self) -> None:
        """Read every change and put them all in force on this replica."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(agent_grants.c.agent_id, agent_grants.c.grants))
            changed = {r.agent_id: list(r.grants) for r in rows}
        if changed != self._changed:
            self._changed = changed
            self.agents.override_grants(changed)

    async def in_force(self, conn: AsyncConnection, agent_id: str) -> list[str]:
        """The agent's grants as they stand, locked for a change until `conn` commits."""
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(agent_id)})
        row = await conn.scalar(
            select(agent_grants.c.grants).where(agent_grants.c.agent_id == agent_id)
        )
        return list(row) if row is not None else list(self.agents.configs[agent_id].grants)

    async def save(self, conn: AsyncConnection, agent_id: str, grants: list[str], who: str) -> None:
        now = datetime.now(UTC)
        stmt = insert(agent_grants).values(
            agent_id=agent_id, grants=grants, changed_by=who, changed_at=now
        )
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[agent_grants.c.agent_id],
                set_={"grants": grants, "changed_by": who, "changed_at": now},
            )
        )

    async def committed(self, agent_id: str, grants: list[str]) -> None:
        """After the commit: in force here at once, and on the other replicas on notice."""
        self._changed = {**self._changed, agent_id: list(grants)}
        self.agents.override_grants(self._changed)
        try:
            await self.bus.publish(
                self.bus.subjects.agent_grants_changed, GrantsChanged(agent_id=agent_id)
            )
        except Exception as exc:  # the periodic reload still carries it everywhere
            log.warning("could not announce the grant change of %s: %s", agent_id, exc)

    async def on_changed(self, _notice: GrantsChanged) -> None:
        await self.load()

    async def refresh_forever(self) -> None:
        await every(self.refresh_s, self.load, FailureLog(log, "reloading grant changes"))
