"""Grant changes made through `PUT /v1/agents/{id}/grants`, kept on the agent's row in
`agents` (one place: the agents API edits the same row) in the same transaction as
their audit records, and in force on every brain replica.

The replica that makes a change applies it at once and broadcasts
`agents.grants_changed`; the others reload on that notice. Every replica also reloads
every `refresh_s`, so one that missed a notice (NATS was away) is behind for that long
at most. Every change to agents and policy takes one advisory lock
(`policy_tables.lock`), so each audit record's added/removed lists are against the
grants really in force before it.

This class alone lays grant changes over the seeded agents (tests that serve the policy
routes without a brain); the brain runs its subclass `agent_store.AgentStore`, which
puts the whole stored definitions in force.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.config import AgentConfig, AgentKey, Agents
from tether_brain.persistence.policy_tables import agents_table, bump, lock
from tether_common.background import FailureLog, every
from tether_common.bus import Bus
from tether_common.errors import NotFoundError
from tether_common.messages.runs import GrantsChanged

log = logging.getLogger(__name__)

API = "api"  # a row changed through the API: seeds never replace it
SETTINGS = "settings"  # a row still as the settings seeded it


class GrantOverrides:
    def __init__(self, engine: AsyncEngine, agents: Agents, bus: Bus, *, refresh_s: float) -> None:
        self.engine = engine
        self.agents = agents
        self.bus = bus
        self.refresh_s = refresh_s

    async def load(self) -> None:
        """Read every grant change and put them all in force on this replica."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(agents_table.c.tenant, agents_table.c.agent_id, agents_table.c.spec).where(
                    and_(agents_table.c.source == API, agents_table.c.deleted.is_(False))
                )
            )
            changed = {(r.tenant, r.agent_id): list(r.spec.get("grants", [])) for r in rows}
        self.agents.lay_grants(changed)

    async def in_force(self, conn: AsyncConnection, key: AgentKey) -> list[str]:
        """The agent's grants as they stand, locked for a change until `conn` commits."""
        await lock(conn)
        spec = await conn.scalar(
            select(agents_table.c.spec).where(
                and_(
                    row_is(key),
                    agents_table.c.source == API,
                    agents_table.c.deleted.is_(False),
                )
            )
        )
        if spec is not None:
            return list(spec["grants"])
        found = self.agents.configs.get(key)
        if found is None:
            raise NotFoundError(f"no agent '{key[1]}'")
        return list(found.grants)

    async def save(self, conn: AsyncConnection, key: AgentKey, grants: list[str], who: str) -> None:
        """Store the agent's new grants (after `in_force`, in its transaction): on its row,
        or on a new row from the definition in force here."""
        now = datetime.now(UTC)
        spec = await conn.scalar(select(agents_table.c.spec).where(row_is(key)))
        if spec is not None:
            await conn.execute(
                update(agents_table)
                .where(row_is(key))
                .values(
                    spec={**spec, "grants": list(grants)},
                    version=agents_table.c.version + 1,
                    source=API,
                    deleted=False,
                    changed_by=who,
                    changed_at=now,
                )
            )
        else:
            config = self.agents.configs[key].model_copy(update={"grants": list(grants)})
            await conn.execute(
                insert(agents_table)
                .values(**row_values(key[1], config, who, now, source=API, version=1))
                .on_conflict_do_nothing()
            )
        await bump(conn)

    async def committed(self, key: AgentKey, _grants: list[str]) -> None:
        """After the commit: in force here at once, and on the other replicas on notice."""
        await self.load()
        await self.announce(f"agent:{key[0]}/{key[1]}")

    async def announce(self, resource: str) -> None:
        """Tell every replica to reload (`resource` names what changed, for the logs)."""
        try:
            await self.bus.publish(
                self.bus.subjects.agent_grants_changed, GrantsChanged(agent_id=resource)
            )
        except Exception as exc:  # the periodic reload still carries it everywhere
            log.warning("could not announce the change of %s: %s", resource, exc)

    async def on_changed(self, _notice: GrantsChanged) -> None:
        await self.load()

    async def refresh_forever(self) -> None:
        await every(self.refresh_s, self.load, FailureLog(log, "reloading agents and policy"))


def row_is(key: AgentKey) -> ColumnElement[bool]:
    """The `agents` row of one (tenant, id)."""
    return and_(agents_table.c.tenant == key[0], agents_table.c.agent_id == key[1])


def row_values(
    agent_id: str,
    config: AgentConfig,
    who: str,
    now: datetime,
    *,
    source: str,
    version: int,
) -> dict[str, Any]:
    """An `agents` row for `config` (tenant and owner copied out for filtering)."""
    return {
        "agent_id": agent_id,
        "tenant": config.tenant,
        "owner": config.owner,
        "spec": config.model_dump(mode="json"),
        "version": version,
        "source": source,
        "deleted": False,
        "changed_by": who,
        "changed_at": now,
    }
