"""Seeding the stored agents and global policy from the settings: a seed is written
where its row is missing, and rewritten when the settings change only while the row is
still the seed (`source = settings`); a row changed through the API is never seeded over.
Grants once changed through the old `agent_grants` table are folded in on first start."""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.config import GLOBAL, AgentConfig, Agents
from tether_brain.agents.overrides import API, SETTINGS
from tether_brain.agents.records import SEEDED_BY, Kind, document_row, legacy_grants, spec_of
from tether_brain.persistence.policy_tables import agents_table, bump, lock


class Seeded(Protocol):
    """What seeding writes through (the agents store's own writers, so a seed is stored,
    versioned and audited as any change)."""

    engine: AsyncEngine
    agents: Agents

    async def write_agent(
        self,
        conn: AsyncConnection,
        agent_id: str,
        config: AgentConfig,
        row: Any,
        version: int,
        who: str,
        source: str,
    ) -> None: ...

    async def write_document(
        self,
        conn: AsyncConnection,
        kind: Kind,
        scope: str,
        body: Any,
        version: int,
        who: str,
        source: str,
    ) -> None: ...

    async def record(
        self, conn: AsyncConnection, event: str, resource: str, before: Any, after: Any
    ) -> None: ...

    async def announce(self, resource: str) -> None: ...


async def seed(store: Seeded) -> None:
    """Write the settings' agents and global policy where they are missing or still
    the seed (see module); under the policy lock, so replicas may start together."""
    async with store.engine.begin() as conn:
        await lock(conn)
        rows = {(r.tenant, r.agent_id): r for r in await conn.execute(select(agents_table))}
        legacy = await legacy_grants(conn)
        changed = False
        for (tenant, agent_id), config in store.agents.seeds.items():
            row = rows.get((tenant, agent_id))
            if row is None:
                grants = legacy.get(agent_id)
                seed = config if grants is None else config.model_copy(update={"grants": grants})
                source = SETTINGS if grants is None else API
                await store.write_agent(conn, agent_id, seed, None, 1, SEEDED_BY, source)
                await store.record(conn, "agent.seeded", f"agent:{agent_id}", None, seed)
                changed = True
            elif row.source == SETTINGS and row.spec != spec_of(config):
                await store.write_agent(
                    conn, agent_id, config, row, row.version + 1, SEEDED_BY, SETTINGS
                )
                await store.record(conn, "agent.seeded", f"agent:{agent_id}", row.spec, config)
                changed = True
        seeds: tuple[tuple[Kind, Any], ...] = (
            ("guardrails", dict(store.agents.seed_guardrails)),
            ("allowlist", list(store.agents.seed_allowlist)),
        )
        for kind, body in seeds:
            changed |= await _seed_document(store, conn, kind, body)
        if legacy:
            await conn.execute(text("DELETE FROM agent_grants"))
        if changed:
            await bump(conn)
    if changed:  # replicas already serving (a rolling restart) take the new seeds now
        await store.announce("seeds")


async def _seed_document(store: Seeded, conn: AsyncConnection, kind: Kind, body: Any) -> bool:
    found = await document_row(conn, kind, GLOBAL)
    if found is not None and (found.source != SETTINGS or found.body == body):
        return False
    before = None if found is None else found.body
    version = 1 if found is None else found.version + 1
    await store.write_document(conn, kind, GLOBAL, body, version, SEEDED_BY, SETTINGS)
    await store.record(conn, f"{kind}.seeded", f"{kind}:{GLOBAL}", before, body)
    return True
