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

Seeds: a settings agent (or the settings' global guardrails/allow-list) is written
when its row is missing, and rewritten when the settings change only while the row is
still the seed (`source = settings`). A row changed or deleted through the API
(`source = api`) is never seeded over again. Grants once changed through the old
`agent_grants` table are folded into the seeded rows on the first start.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import and_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.config import GLOBAL, AgentConfig, Agents, PolicySnapshot
from tether_brain.agents.overrides import API, SETTINGS, GrantOverrides, row_values
from tether_brain.persistence import trail
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

POLICY_TRAIL = "policy"  # one hash chain for every agent and policy change
SEEDED_BY = "settings"
Kind = Literal["guardrails", "allowlist"]
KINDS: tuple[Kind, ...] = ("guardrails", "allowlist")


def digest(value: Any) -> str:
    """sha256 of a resource's canonical JSON (the audit's before/after)."""
    return hashlib.sha256(audit.canonical(value).encode()).hexdigest()


def spec_of(config: AgentConfig) -> dict[str, Any]:
    return config.model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class StoredAgent:
    agent_id: str
    config: AgentConfig
    version: int
    source: str
    changed_by: str
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A scope's guardrails (`dict` pattern -> rule) or allow-list (`list` of entries);
    version 0: never stored (the body is empty)."""

    kind: Kind
    scope: str
    body: Any
    version: int
    source: str | None
    changed_by: str | None
    changed_at: datetime | None


# The caller's rule for a change: given the agent as it stands (None: none), the new
# definition (None: delete it), or an exception (403/404/422) that stops the change.
Decide = Callable[[StoredAgent | None], AgentConfig | None]


def _agent(row: Any) -> StoredAgent | None:
    try:
        config = AgentConfig.model_validate(row.spec)
    except ValidationError as exc:  # never in force half-read; the API shows it missing
        log.error("agent %s is stored in a shape this brain cannot read: %s", row.agent_id, exc)
        return None
    return StoredAgent(
        row.agent_id, config, row.version, row.source, row.changed_by, row.changed_at
    )


def _empty(kind: Kind) -> Any:
    return {} if kind == "guardrails" else []


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
                stored = [a for r in rows if (a := _agent(r)) is not None]
                docs = (await conn.execute(select(policy_documents))).all()
        agents = {a.agent_id: self._own_seed(a) for a in stored}
        guardrails = {d.scope: dict(self._own_body(d)) for d in docs if d.kind == "guardrails"}
        allowlist = {d.scope: list(self._own_body(d)) for d in docs if d.kind == "allowlist"}
        return PolicySnapshot(int(generation or 0), agents, guardrails, allowlist)

    # A row still from the settings (never changed through the API) follows this
    # replica's own settings: replicas configured alike agree anyway, and one started
    # with other settings (a rolling restart, or another stack on a shared database)
    # is never silently switched to its neighbour's seed.
    def _own_seed(self, stored: StoredAgent) -> AgentConfig:
        if stored.source != SETTINGS:
            return stored.config
        return self.agents.seeds.get(stored.agent_id, stored.config)

    def _own_body(self, doc: Any) -> Any:
        if doc.source != SETTINGS or doc.scope != GLOBAL:
            return doc.body
        if doc.kind == "guardrails":
            return dict(self.agents.seed_guardrails)
        return list(self.agents.seed_allowlist)

    async def load(self) -> None:
        """Put what is stored in force here (never an older snapshot over a newer one)."""
        self.agents.install(await self.snapshot())

    # ---- seeding -----------------------------------------------------------------

    async def seed(self) -> None:
        """Write the settings' agents and global policy where they are missing or still
        the seed (see module); under the policy lock, so replicas may start together."""
        async with self.engine.begin() as conn:
            await lock(conn)
            rows = {r.agent_id: r for r in await conn.execute(select(agents_table))}
            legacy = await _legacy_grants(conn)
            changed = False
            for agent_id, config in self.agents.seeds.items():
                row = rows.get(agent_id)
                if row is None:
                    grants = legacy.get(agent_id)
                    seed = (
                        config if grants is None else config.model_copy(update={"grants": grants})
                    )
                    source = SETTINGS if grants is None else API
                    await self._write_agent(conn, agent_id, seed, None, 1, SEEDED_BY, source)
                    await self._record(conn, "agent.seeded", f"agent:{agent_id}", None, seed)
                    changed = True
                elif row.source == SETTINGS and row.spec != spec_of(config):
                    await self._write_agent(
                        conn, agent_id, config, row, row.version + 1, SEEDED_BY, SETTINGS
                    )
                    await self._record(conn, "agent.seeded", f"agent:{agent_id}", row.spec, config)
                    changed = True
            seeds: tuple[tuple[Kind, Any], ...] = (
                ("guardrails", dict(self.agents.seed_guardrails)),
                ("allowlist", list(self.agents.seed_allowlist)),
            )
            for kind, body in seeds:
                changed |= await self._seed_document(conn, kind, body)
            if legacy:
                await conn.execute(text("DELETE FROM agent_grants"))
            if changed:
                await bump(conn)
        if changed:  # replicas already serving (a rolling restart) take the new seeds now
            await self.announce("seeds")

    async def _seed_document(self, conn: AsyncConnection, kind: Kind, body: Any) -> bool:
        found = await _document_row(conn, kind, GLOBAL)
        if found is not None and (found.source != SETTINGS or found.body == body):
            return False
        before = None if found is None else found.body
        version = 1 if found is None else found.version + 1
        await self._write_document(conn, kind, GLOBAL, body, version, SEEDED_BY, SETTINGS)
        await self._record(conn, f"{kind}.seeded", f"{kind}:{GLOBAL}", before, body)
        return True

    # ---- agents ------------------------------------------------------------------

    async def agents_stored(self) -> list[StoredAgent]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(agents_table)
                .where(agents_table.c.deleted.is_(False))
                .order_by(agents_table.c.agent_id)
            )
            return [a for r in rows if (a := _agent(r)) is not None]

    async def agent(self, agent_id: str) -> StoredAgent:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(agents_table).where(
                        and_(agents_table.c.agent_id == agent_id, agents_table.c.deleted.is_(False))
                    )
                )
            ).first()
        found = None if row is None else _agent(row)
        if found is None:
            raise NotFoundError(f"no agent '{agent_id}'")
        return found

    async def change_agent(
        self,
        agent_id: str,
        who: str,
        decide: Decide,
        *,
        expected: int | None,
        create: bool = False,
    ) -> StoredAgent | None:
        """Create (`create`), replace or delete (`decide` answers None) one agent; returns
        it as stored (None when deleted). 409 `agent_exists`/`version_conflict`."""
        async with self.engine.begin() as conn:
            await lock(conn)
            row = (
                await conn.execute(select(agents_table).where(agents_table.c.agent_id == agent_id))
            ).first()
            current = None if row is None or row.deleted else _agent(row)
            if create and row is not None and not row.deleted:
                raise ConflictError(
                    f"agent '{agent_id}' already exists", code=ErrorCode.AGENT_EXISTS
                )
            if not create and current is None:
                raise NotFoundError(f"no agent '{agent_id}'")
            if not create and expected is not None and current and current.version != expected:
                raise ConflictError(
                    f"agent '{agent_id}' is at version {current.version}, not {expected}",
                    code=ErrorCode.VERSION_CONFLICT,
                )
            new = decide(current)
            version = 1 if row is None else row.version + 1
            now = datetime.now(UTC)
            before = None if row is None or row.deleted else row.spec
            if new is None:
                await conn.execute(
                    update(agents_table)
                    .where(agents_table.c.agent_id == agent_id)
                    .values(
                        version=version, source=API, deleted=True, changed_by=who, changed_at=now
                    )
                )
                await self._record(conn, "agent.deleted", f"agent:{agent_id}", before, None, who)
            else:
                await self._write_agent(conn, agent_id, new, row, version, who, API)
                event = "agent.created" if current is None else "agent.changed"
                await self._record(conn, event, f"agent:{agent_id}", before, new, who)
            await bump(conn)
        await self.load()
        await self.announce(f"agent:{agent_id}")
        if new is None:
            return None
        return StoredAgent(agent_id, new, version, API, who, now)

    async def _write_agent(
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
            await conn.execute(
                update(agents_table).where(agents_table.c.agent_id == agent_id).values(**values)
            )

    # ---- the grants route (policy_api): the same rows, the same lock -----------------

    async def in_force(self, conn: AsyncConnection, agent_id: str) -> list[str]:
        await lock(conn)
        row = (
            await conn.execute(select(agents_table).where(agents_table.c.agent_id == agent_id))
        ).first()
        found = None if row is None or row.deleted else _agent(row)
        if found is None:
            raise NotFoundError(f"no agent '{agent_id}'")
        return list(found.config.grants)

    async def save(self, conn: AsyncConnection, agent_id: str, grants: list[str], who: str) -> None:
        row = (
            await conn.execute(select(agents_table).where(agents_table.c.agent_id == agent_id))
        ).first()
        await super().save(conn, agent_id, grants, who)
        if row is not None:
            after = {**row.spec, "grants": list(grants)}
            await self._record(conn, "agent.changed", f"agent:{agent_id}", row.spec, after, who)

    async def committed(self, agent_id: str, _grants: list[str]) -> None:
        await self.load()
        await self.announce(f"agent:{agent_id}")

    # ---- guardrails and allow-list ---------------------------------------------------

    async def document(self, kind: Kind, scope: str) -> StoredDocument:
        async with self.engine.connect() as conn:
            found = await _document_row(conn, kind, scope)
        if found is None:
            return StoredDocument(kind, scope, _empty(kind), 0, None, None, None)
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
            found = await _document_row(conn, kind, scope)
            version = 0 if found is None else found.version
            if expected is not None and expected != version:
                raise ConflictError(
                    f"the {kind} of '{scope}' are at version {version}, not {expected}",
                    code=ErrorCode.VERSION_CONFLICT,
                )
            before = None if found is None else found.body
            await self._write_document(conn, kind, scope, body, version + 1, who, API)
            await self._record(conn, f"{kind}.changed", f"{kind}:{scope}", before, body, who)
            await bump(conn)
        await self.load()
        await self.announce(f"{kind}:{scope}")
        return StoredDocument(kind, scope, body, version + 1, API, who, datetime.now(UTC))

    async def _write_document(
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

    async def _record(
        self,
        conn: AsyncConnection,
        event: str,
        resource: str,
        before: Any,
        after: Any,
        who: str = SEEDED_BY,
    ) -> None:
        """One record in the `policy` trail: who changed what, with the digests of the
        resource before and after (None: it did not exist / no longer does)."""
        if isinstance(after, AgentConfig):
            after = spec_of(after)
        data = {
            "resource": resource,
            "by": who,
            "before": None if before is None else digest(before),
            "after": None if after is None else digest(after),
        }
        await trail.record(conn, POLICY_TRAIL, event, data, sink=self.sink)


async def _document_row(conn: AsyncConnection, kind: Kind, scope: str) -> Any:
    return (
        await conn.execute(
            select(policy_documents).where(
                and_(policy_documents.c.kind == kind, policy_documents.c.scope == scope)
            )
        )
    ).first()


async def _legacy_grants(conn: AsyncConnection) -> dict[str, list[str]]:
    """Grant changes kept by the brain before agents were stored (migration 0005)."""
    exists = await conn.scalar(text("SELECT to_regclass('agent_grants') IS NOT NULL"))
    if not exists:
        return {}
    rows = await conn.execute(text("SELECT agent_id, grants FROM agent_grants"))
    return {r.agent_id: list(r.grants) for r in rows}


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
