"""The `documents` table (migration 0014) and its SQL: adding, listing, showing and
removing a tenant's documents, and the search that retrieval runs.

The search filters in its own WHERE clause: the run's tenant, and a reader the caller
is (`readers && keys`). A row the caller may not read is never fetched, so no code
after the query can let one through."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    MetaData,
    String,
    Table,
    Text,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence import fulltext
from tether_common.errors import MessageError, NotFoundError
from tether_common.messages.documents import DocumentSummary, DocumentView

metadata = MetaData()

MAX_DOCUMENTS_PER_TENANT = 10_000
LISTED = 1000  # documents in one listing

documents = Table(
    "documents",
    metadata,
    Column("doc_id", String(40), primary_key=True),
    Column("tenant", String(200), nullable=False),
    Column("collection", String(200), nullable=False),
    Column("title", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("readers", ARRAY(Text), nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # and `search`, the tsvector PostgreSQL computes from title and body (only SQL reads it)
)

_SUMMARY = (
    documents.c.doc_id,
    documents.c.tenant,
    documents.c.collection,
    documents.c.title,
    documents.c.readers,
    func.char_length(documents.c.body).label("chars"),
    documents.c.created_by,
    documents.c.created_at,
)

# Ranked in the inner query, so the snippets (which read whole bodies) are made for the
# returned rows only. `tenant` and `keys` filter before anything is ranked.
_SEARCH = text(
    f"""
    WITH q AS (SELECT {fulltext.tsquery()} AS query)
    SELECT hit.doc_id, hit.collection, hit.title, hit.rank,
           ts_headline(CAST(:config AS regconfig), hit.body, q.query, :headline) AS snippet
    FROM (
        SELECT d.doc_id, d.collection, d.title, d.body, ts_rank(d.search, q.query) AS rank
        FROM documents AS d, q
        WHERE d.tenant = :tenant
          AND d.readers && CAST(:keys AS text[])
          AND (CAST(:collection AS text) IS NULL OR d.collection = CAST(:collection AS text))
          AND d.search @@ q.query
        ORDER BY rank DESC, d.doc_id
        LIMIT :limit
    ) AS hit, q
    ORDER BY hit.rank DESC, hit.doc_id
    """
)
_HEADLINE = (
    'MaxWords=35, MinWords=12, MaxFragments=2, FragmentDelimiter=" … ", StartSel=**, StopSel=**'
)


@dataclass(frozen=True, slots=True)
class Hit:
    doc_id: str
    collection: str
    title: str
    rank: float
    snippet: str


def _lock_key(tenant: str) -> int:
    """The advisory lock that counts one tenant's documents one add at a time."""
    digest = hashlib.sha256(f"tether-documents:{tenant}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _summary(row: Any) -> DocumentSummary:
    return DocumentSummary.model_validate(row, from_attributes=True)


class DocumentStore:
    def __init__(self, engine: AsyncEngine, *, most: int = MAX_DOCUMENTS_PER_TENANT) -> None:
        self.engine = engine
        self.most = most  # documents one tenant may hold

    async def add(
        self,
        conn: AsyncConnection,
        *,
        tenant: str,
        collection: str,
        title: str,
        body: str,
        readers: Sequence[str],
        by: str,
    ) -> DocumentView:
        """A new document, in `conn`'s transaction (which then holds the tenant's count
        lock); `too_large` past `most`."""
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(tenant)})
        held = await conn.scalar(
            select(func.count()).select_from(documents).where(documents.c.tenant == tenant)
        )
        if (held or 0) >= self.most:
            raise MessageError(
                f"tenant '{tenant}' holds {self.most} documents, the most it "
                "may; remove some first",
                code="too_large",
            )
        row = (
            await conn.execute(
                documents.insert()
                .values(
                    doc_id=f"doc_{uuid.uuid4().hex}",
                    tenant=tenant,
                    collection=collection,
                    title=title,
                    body=body,
                    readers=sorted(set(readers)),
                    created_by=by,
                    created_at=datetime.now(UTC),
                )
                .returning(*_SUMMARY, documents.c.body)
            )
        ).one()
        return DocumentView.model_validate(row, from_attributes=True)

    async def listing(self, tenant: str | None, collection: str) -> list[DocumentSummary]:
        """A collection's documents in `tenant` (None: every tenant's), newest first."""
        query = (
            select(*_SUMMARY)
            .where(documents.c.collection == collection)
            .order_by(documents.c.created_at.desc(), documents.c.doc_id)
            .limit(LISTED)
        )
        if tenant is not None:
            query = query.where(documents.c.tenant == tenant)
        async with self.engine.connect() as conn:
            return [_summary(r) for r in await conn.execute(query)]

    async def collections(self, tenant: str | None) -> list[tuple[str, str, int]]:
        """(tenant, collection, documents) within `tenant` (None: every tenant)."""
        query = (
            select(documents.c.tenant, documents.c.collection, func.count())
            .group_by(documents.c.tenant, documents.c.collection)
            .order_by(documents.c.tenant, documents.c.collection)
        )
        if tenant is not None:
            query = query.where(documents.c.tenant == tenant)
        async with self.engine.connect() as conn:
            return [(r[0], r[1], int(r[2])) for r in await conn.execute(query)]

    async def get(self, tenant: str | None, collection: str, doc_id: str) -> DocumentView:
        """One document of `tenant` (None: any); 404 for one out of reach as for none."""
        query = select(*_SUMMARY, documents.c.body).where(
            documents.c.doc_id == doc_id, documents.c.collection == collection
        )
        if tenant is not None:
            query = query.where(documents.c.tenant == tenant)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFoundError(f"no document '{doc_id}' in collection '{collection}'")
        return DocumentView.model_validate(row, from_attributes=True)

    async def remove(
        self, conn: AsyncConnection, tenant: str | None, collection: str, doc_id: str
    ) -> DocumentView | None:
        """Delete one document of `tenant` (None: any), in `conn`'s transaction: the
        document as it was, or None when there is none within reach."""
        query = documents.delete().where(
            documents.c.doc_id == doc_id, documents.c.collection == collection
        )
        if tenant is not None:
            query = query.where(documents.c.tenant == tenant)
        row = (await conn.execute(query.returning(*_SUMMARY, documents.c.body))).first()
        return None if row is None else DocumentView.model_validate(row, from_attributes=True)

    async def any(self) -> bool:
        """Whether any tenant holds a document (retrieval is offered only then)."""
        async with self.engine.connect() as conn:
            return bool(await conn.scalar(select(select(documents.c.doc_id).exists())))

    async def search(
        self,
        *,
        tenant: str,
        keys: Sequence[str],
        query: str,
        collection: str | None,
        limit: int,
    ) -> list[Hit]:
        """The best `limit` documents of `tenant` matching `query` (web-search syntax:
        words, "phrases", `or`, `-word`; never a syntax error) that one of `keys` may read."""
        params = fulltext.params(query) | {
            "tenant": tenant,
            "keys": list(keys),
            "collection": collection,
            "limit": limit,
            "headline": _HEADLINE,
        }
        async with self.engine.connect() as conn:
            rows = await conn.execute(_SEARCH, params)
            return [Hit(r.doc_id, r.collection, r.title, float(r.rank), r.snippet) for r in rows]

    async def words(self, query: str) -> int:
        """How many searchable terms `query` holds (0: only stop words or punctuation)."""
        async with self.engine.connect() as conn:
            return await fulltext.words(conn, query)
