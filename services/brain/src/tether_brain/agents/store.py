"""Agents and the organisation policy (guardrails, shell allow-list) as stored resources:
seeded from the settings, changed through the API with optimistic concurrency, every
change an audit record in the `policy` trail, in force on every replica.

Owns: reading and writing `agents` and `policy_documents` (`policy_tables`), seeding
them, and putting a consistent snapshot in force (`Agents.install`). Every change
takes the one policy lock, checks the caller's `version`, lets the caller's rule
decide on the row as locked (so who may change it is decided on what is changed, not
on an earlier read), writes, records `before`/`after` digests (sha256 of the canonical
JSON of the resource) in the same transaction, and bumps the generation. After the
commit the changing replica reloads at once and announces the change; the others
reload on the notice, or within `refresh_s` if they missed it.

Seeding from the settings: `seeding.py`; what is kept and recorded: `records.py`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents import seeding
from tether_brain.agents.config import AgentConfig, AgentKey, Agents, PolicySnapshot
from tether_brain.agents.overrides import API, GrantOverrides, row_is, row_values
from tether_brain.agents.records import (
    KINDS,
    POLICY_TRAIL,
    SEEDED_BY,
    Decide,
    Kind,
    StoredAgent,
    StoredDocument,
    agent_of,
    digest,
    document_row,
    empty_body,
    own_body,
    own_seed,
    record_change,
)
from tether_brain.persistence.policy_tables import (
    agents_table,
    bump,
    lock,
    policy_documents,
    policy_generation,
)
from tether_common import audit
from tether_common.bus import Bus
from tether_common.errors import ConflictError, ErrorCode, NotFoundError

log = logging.getLogger(__name__)


class AgentStore(GrantOverrides):
    def __init__(
        self,
        engine: AsyncEngine,
        agents: Agents,
        bus: Bus,
        *,
        refresh_s: float,
        sink: audit.JsonlSink | None = None,
    ) -> None:
        super().__init__(engine, agents, bus, refresh_s=refresh_s)
        self.sink = sink

    # ---- in force ----------------------------------------------------------------

    async def snapshot(self) -> PolicySnapshot:
        """Everything stored, read in one repeatable-read transaction."""
        async with self.engine.connect() as raw:
            conn = await raw.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                generation = await conn.scalar(select(policy_generation.c.generation))
                rows = await conn.execute(
                    select(agents_table).where(agents_table.c.deleted.is_(False))
                )
                stored = [a for r in rows if (a := agent_of(r)) is not None]
                docs = (await conn.execute(select(policy_documents))).all()
        agents = {a.key: own_seed(self.agents, a) for a in stored}
        guardrails = {
            d.scope: dict(own_body(self.agents, d)) for d in docs if d.kind == "guardrails"
        }
        allowlist = {d.scope: list(own_body(self.agents, d)) for d in docs if d.kind == "allowlist"}
        return PolicySnapshot(int(generation or 0), agents, guardrails, allowlist)

    async def load(self) -> None:
        """Put what is stored in force here (never an older snapshot over a newer one)."""
        self.agents.install(await self.snapshot())

    async def seed(self) -> None:
        """Write the settings' agents and global policy where they are missing or still
        the seed (`seeding.py`); under the policy lock, so replicas may start together."""
        await seeding.seed(self)

    # ---- agents ------------------------------------------------------------------

    async def agents_stored(self) -> list[StoredAgent]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(agents_table)
                .where(agents_table.c.deleted.is_(False))
                .order_by(agents_table.c.agent_id, agents_table.c.tenant)
            )
            return [a for r in rows if (a := agent_of(r)) is not None]

    async def agents_named(self, agent_id: str) -> dict[AgentKey, StoredAgent]:
        """Every stored agent of this id, in whichever tenant, by key."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(agents_table).where(
                    and_(agents_table.c.agent_id == agent_id, agents_table.c.deleted.is_(False))
                )
            )
            return {a.key: a for r in rows if (a := agent_of(r)) is not None}

    async def agent(self, key: AgentKey) -> StoredAgent:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(agents_table).where(and_(row_is(key), agents_table.c.deleted.is_(False)))
                )
            ).first()
        found = None if row is None else agent_of(row)
        if found is None:
            raise NotFoundError(f"no agent '{key[1]}'")
        return found

    async def change_agent(
        self,
        key: AgentKey,
        who: str,
        decide: Decide,
        *,
        expected: int | None,
        create: bool = False,
    ) -> StoredAgent | None:
        """Create (`create`), replace or delete (`decide` answers None) the agent `key`
        (tenant, id); returns it as stored (None when deleted). 409 `agent_exists`/
        `version_conflict`. The caller has checked that the key is within its reach
        (creating: on the body; else `agent_reach.addressed`), so these say nothing
        of another tenant; `decide` rules again on the row as locked."""
        agent_id = key[1]
        async with self.engine.begin() as conn:
            await lock(conn)
            row = (await conn.execute(select(agents_table).where(row_is(key)))).first()
            current = None if row is None or row.deleted else agent_of(row)
            if create and row is not None and not row.deleted:
                raise ConflictError(
                    f"agent '{agent_id}' already exists in tenant '{key[0]}'",
                    code=ErrorCode.AGENT_EXISTS,
                )
            if not create and current is None:
                raise NotFoundError(f"no agent '{agent_id}'")
            if not create and expected is not None and current and current.version != expected:
                raise ConflictError(
                    f"agent '{agent_id}' is at version {current.version}, not {expected}",
                    code=ErrorCode.VERSION_CONFLICT,
                )
            new = decide(current)
            if new is not None and new.shared:
                await self._one_shared(conn, key)
            version = 1 if row is None else row.version + 1
            now = datetime.now(UTC)
            before = None if row is None or row.deleted else row.spec
            resource = f"agent:{agent_id}"
            if new is None:
                await conn.execute(
                    update(agents_table)
                    .where(row_is(key))
                    .values(
                        version=version, source=API, deleted=True, changed_by=who, changed_at=now
                    )
                )
                await self.record(conn, "agent.deleted", resource, before, None, who, key[0])
            else:
                await self.write_agent(conn, agent_id, new, row, version, who, API)
                event = "agent.created" if current is None else "agent.changed"
                await self.record(conn, event, resource, before, new, who, key[0])
            await bump(conn)
        await self.load()
        await self.announce(f"agent:{key[0]}/{agent_id}")
        if new is None:
            return None
        return StoredAgent(agent_id, new, version, API, who, now)

    async def _one_shared(self, conn: AsyncConnection, key: AgentKey) -> None:
        """409 `agent_exists` when another tenant already shares an agent of this id: a
        shared id must name one agent wherever it is used (under the policy lock)."""
        rows = await conn.execute(
            select(agents_table).where(
                and_(
                    agents_table.c.agent_id == key[1],
                    agents_table.c.tenant != key[0],
                    agents_table.c.deleted.is_(False),
                )
            )
        )
        for row in rows:
            other = agent_of(row)
            if other is not None and self.agents.is_shared(other.key, other.config):
                raise ConflictError(
                    f"tenant '{other.key[0]}' already shares an agent '{key[1]}'",
                    code=ErrorCode.AGENT_EXISTS,
                )

    async def write_agent(
        self,
        conn: AsyncConnection,
        agent_id: str,
        config: AgentConfig,
        row: Any,
        version: int,
        who: str,
        source: str,
    ) -> None:
        values = row_values(
            agent_id, config, who, datetime.now(UTC), source=source, version=version
        )
        if row is None:
            await conn.execute(insert(agents_table).values(**values))
        else:
            key = (row.tenant, agent_id)  # an agent's tenant is fixed (part of its key)
            await conn.execute(update(agents_table).where(row_is(key)).values(**values))

    # ---- the grants route (policy_api): the same rows, the same lock -----------------

    async def in_force(self, conn: AsyncConnection, key: AgentKey) -> list[str]:
        await lock(conn)
        row = (await conn.execute(select(agents_table).where(row_is(key)))).first()
        found = None if row is None or row.deleted else agent_of(row)
        if found is None:
            raise NotFoundError(f"no agent '{key[1]}'")
        return list(found.config.grants)

    async def save(self, conn: AsyncConnection, key: AgentKey, grants: list[str], who: str) -> None:
        row = (await conn.execute(select(agents_table).where(row_is(key)))).first()
        await super().save(conn, key, grants, who)
        if row is not None:
            after = {**row.spec, "grants": list(grants)}
            resource = f"agent:{key[1]}"
            await self.record(conn, "agent.changed", resource, row.spec, after, who, key[0])

    async def committed(self, key: AgentKey, _grants: list[str]) -> None:
        await self.load()
        await self.announce(f"agent:{key[0]}/{key[1]}")

    # ---- guardrails and allow-list ---------------------------------------------------

    async def document(self, kind: Kind, scope: str) -> StoredDocument:
        async with self.engine.connect() as conn:
            found = await document_row(conn, kind, scope)
        if found is None:
            return StoredDocument(kind, scope, empty_body(kind), 0, None, None, None)
        return StoredDocument(
            kind, scope, found.body, found.version, found.source, found.changed_by, found.changed_at
        )

    async def change_document(
        self, kind: Kind, scope: str, body: Any, who: str, *, expected: int | None
    ) -> StoredDocument:
        """Replace one scope's guardrails or allow-list; 409 `version_conflict` when
        `expected` is not the stored version (0: not stored yet)."""
        async with self.engine.begin() as conn:
            await lock(conn)
            found = await document_row(conn, kind, scope)
            version = 0 if found is None else found.version
            if expected is not None and expected != version:
                raise ConflictError(
                    f"the {kind} of '{scope}' are at version {version}, not {expected}",
                    code=ErrorCode.VERSION_CONFLICT,
                )
            before = None if found is None else found.body
            await self.write_document(conn, kind, scope, body, version + 1, who, API)
            await self.record(conn, f"{kind}.changed", f"{kind}:{scope}", before, body, who)
            await bump(conn)
        await self.load()
        await self.announce(f"{kind}:{scope}")
        return StoredDocument(kind, scope, body, version + 1, API, who, datetime.now(UTC))

    async def write_document(
        self,
        conn: AsyncConnection,
        kind: Kind,
        scope: str,
        body: Any,
        version: int,
        who: str,
        source: str,
    ) -> None:
        now = datetime.now(UTC)
        values = {"body": body, "version": version, "source": source, "changed_by": who}
        stmt = insert(policy_documents).values(kind=kind, scope=scope, changed_at=now, **values)
        await conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[policy_documents.c.kind, policy_documents.c.scope],
                set_={**values, "changed_at": now},
            )
        )

    # ---- the audit ----------------------------------------------------------------------

    async def record(
        self,
        conn: AsyncConnection,
        event: str,
        resource: str,
        before: Any,
        after: Any,
        who: str = SEEDED_BY,
        tenant: str | None = None,
    ) -> None:
        await record_change(
            conn, event, resource, before, after, who, tenant=tenant, sink=self.sink
        )


__all__ = [
    "KINDS",
    "POLICY_TRAIL",
    "AgentStore",
    "Decide",
    "Kind",
    "StoredAgent",
    "StoredDocument",
    "digest",
]
