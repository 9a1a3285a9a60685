"""The `memories` table (migration 0018) and its SQL: adding, listing, forgetting, and
the search behind `memory_search` and a thread's recall.

A memory's namespace is (tenant, agent, owner); no owner is the agent's own, for every
user of the tenant. Every statement that reads or deletes names the tenant in its own
WHERE clause, and a search names the agent and the user too, so a memory outside the
caller's namespace is never fetched, whatever the code after the query does.

Search is behind `MemoryIndex`, the seam for another way of finding memories (vector
search: an embedding per memory in a column or side table of its own, filled when a
memory is added): an index answers a `MemoryScope` and a query with the best memories
of that scope, and must filter by the scope in its own query, as `FullTextIndex` does."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Column, DateTime, MetaData, String, Table, Text, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence import fulltext
from tether_common.errors import MessageError
from tether_common.messages.memory import LISTED, MemoryView

metadata = MetaData()

MAX_MEMORIES_PER_OWNER = 1_000  # in one namespace (a user's with one agent, or an agent's)

memories = Table(
    "memories",
    metadata,
    Column("memory_id", String(40), primary_key=True),
    Column("tenant", String(200), nullable=False),
    Column("agent", String(200), nullable=False),
    Column("owner", String(200)),  # None: the agent's, for every user of the tenant
    Column("text", Text, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # and `search`, the tsvector PostgreSQL computes from the text (only SQL reads it)
)

_VIEW = (
    memories.c.memory_id,
    memories.c.tenant,
    memories.c.agent,
    memories.c.owner,
    memories.c.text,
    memories.c.created_by,
    memories.c.created_at,
)


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Whose memories a search may find: the user's (`owner`) with `agent` in `tenant`,
    and the agent's own. No owner: the agent's own only."""

    tenant: str
    agent: str
    owner: str | None


@dataclass(frozen=True, slots=True)
class Filter:
    """What a listing or a forget covers: None is any (`tenant` None: every tenant, for
    an admin). `agent_wide` narrows to the agents' own memories."""

    tenant: str | None
    owner: str | None = None
    agent: str | None = None
    agent_wide: bool = False


class MemoryIndex(Protocol):
    """The seam for search: the best `limit` memories of `scope` for `query`, best first
    (`rank` set). `any_word`: the query is text, not a query (a user's message that
    recall looks up), so a memory matching any of its words is a candidate."""

    async def search(
        self, scope: MemoryScope, query: str, *, limit: int, any_word: bool = False
    ) -> list[MemoryView]: ...

    async def words(self, query: str) -> int:
        """How many searchable terms `query` holds (0: nothing to search for)."""
        ...


def _search_sql(any_word: bool) -> Any:
    # Ranked by PostgreSQL (`ts_rank`), newest first among equals: a fact saved later
    # usually corrects an earlier one.
    return text(
        f"""
        WITH q AS (SELECT {fulltext.tsquery(any_word=any_word)} AS query)
        SELECT m.memory_id, m.tenant, m.agent, m.owner, m.text, m.created_by, m.created_at,
               ts_rank(m.search, q.query) AS rank
        FROM memories AS m, q
        WHERE m.tenant = :tenant
          AND m.agent = :agent
          AND (m.owner = CAST(:owner AS text) OR m.owner IS NULL)
          AND m.search @@ q.query
        ORDER BY rank DESC, m.created_at DESC, m.memory_id
        LIMIT :limit
        """
    )


_SEARCH = {False: _search_sql(False), True: _search_sql(True)}


class FullTextIndex:
    """`MemoryIndex` over PostgreSQL full-text search (the `search` column's GIN index)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def search(
        self, scope: MemoryScope, query: str, *, limit: int, any_word: bool = False
    ) -> list[MemoryView]:
        params = fulltext.params(query) | {
            "tenant": scope.tenant,
            "agent": scope.agent,
            "owner": scope.owner,
            "limit": limit,
        }
        async with self.engine.connect() as conn:
            rows = await conn.execute(_SEARCH[any_word], params)
            return [_view(r) for r in rows]

    async def words(self, query: str) -> int:
        async with self.engine.connect() as conn:
            return await fulltext.words(conn, query)


def _view(row: Any) -> MemoryView:
    return MemoryView.model_validate(row, from_attributes=True)


def _lock_key(tenant: str, agent: str, owner: str | None) -> int:
    """The advisory lock that counts one namespace's memories one add at a time."""
    name = f"tether-memory:{tenant}/{agent}/{owner or ''}"
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def memory_id_of(key: str) -> str:
    """A memory's id from a key that names its one effect (`run:call` for memory_save):
    the same save sent again is the same row."""
    return f"mem_{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _where(query: Any, scope: Filter) -> Any:
    if scope.tenant is not None:
        query = query.where(memories.c.tenant == scope.tenant)
    if scope.owner is not None:
        query = query.where(memories.c.owner == scope.owner)
    if scope.agent is not None:
        query = query.where(memories.c.agent == scope.agent)
    if scope.agent_wide:
        query = query.where(memories.c.owner.is_(None))
    return query


class MemoryStore:
    def __init__(self, engine: AsyncEngine, *, most: int = MAX_MEMORIES_PER_OWNER) -> None:
        self.engine = engine
        self.most = most  # memories one namespace may hold

    async def add(
        self,
        conn: AsyncConnection,
        *,
        memory_id: str,
        scope: MemoryScope,
        body: str,
        by: str,
    ) -> tuple[MemoryView, bool]:
        """A memory in `scope`, in `conn`'s transaction (which then holds the namespace's
        count lock), and whether it is new: an id already stored is answered with the
        stored row (a save sent again). `too_large` past `most`."""
        lock = _lock_key(scope.tenant, scope.agent, scope.owner)
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock})
        known = await self._get(conn, memory_id, scope.tenant)
        if known is not None:
            return known, False
        owned = memories.c.owner == scope.owner if scope.owner else memories.c.owner.is_(None)
        held = await conn.scalar(
            select(func.count())
            .select_from(memories)
            .where(memories.c.tenant == scope.tenant, memories.c.agent == scope.agent, owned)
        )
        if (held or 0) >= self.most:
            raise MessageError(
                f"{held} memories are kept for this user and agent, the most there may be; "
                "forget some first",
                code="too_large",
            )
        row = (
            await conn.execute(
                insert(memories)
                .values(
                    memory_id=memory_id,
                    tenant=scope.tenant,
                    agent=scope.agent,
                    owner=scope.owner,
                    text=body,
                    created_by=by,
                    created_at=datetime.now(UTC),
                )
                .returning(*_VIEW)
            )
        ).one()
        return _view(row), True

    async def _get(self, conn: AsyncConnection, memory_id: str, tenant: str) -> MemoryView | None:
        query = select(*_VIEW).where(memories.c.memory_id == memory_id, memories.c.tenant == tenant)
        row = (await conn.execute(query)).first()
        return None if row is None else _view(row)

    async def get(self, memory_id: str, tenant: str | None) -> MemoryView | None:
        """One memory of `tenant` (None: any tenant's), or None."""
        query = _where(select(*_VIEW).where(memories.c.memory_id == memory_id), Filter(tenant))
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _view(row)

    async def listing(self, scope: Filter, limit: int = LISTED) -> list[MemoryView]:
        """The memories `scope` covers, newest first."""
        query = _where(select(*_VIEW), scope).order_by(
            memories.c.created_at.desc(), memories.c.memory_id
        )
        async with self.engine.connect() as conn:
            return [_view(r) for r in await conn.execute(query.limit(limit))]

    async def remove(
        self, conn: AsyncConnection, scope: Filter, memory_ids: Sequence[str] | None = None
    ) -> list[MemoryView]:
        """Delete the memories `scope` covers (only those of `memory_ids`, if given), in
        `conn`'s transaction; the memories as they were."""
        query = _where(memories.delete(), scope)
        if memory_ids is not None:
            query = query.where(memories.c.memory_id.in_(list(memory_ids)))
        return [_view(r) for r in await conn.execute(query.returning(*_VIEW))]
