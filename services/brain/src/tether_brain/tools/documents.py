"""The documents a tenant keeps for retrieval, as the API manages them: add, list, show
and remove, each change recorded in the `policy` audit trail in its own transaction (a
change that could not be audited is not made); and whether any document is stored at
all, which decides whether `search_documents` is offered (`tools/search.py`).

Who may: `documents.read` / `documents.write` (an operator in its own tenant, an admin
in the tenant it names). A document out of reach answers 404, exactly like a missing one.
What a run may retrieve is not decided here but in the search's own query."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.records import record_change
from tether_brain.persistence.documents import MAX_DOCUMENTS_PER_TENANT, DocumentStore
from tether_common.errors import NotFoundError
from tether_common.identity import Action, Principal
from tether_common.messages.documents import (
    AddDocument,
    CollectionList,
    CollectionSummary,
    DocumentList,
    DocumentView,
)

log = logging.getLogger(__name__)


def scope_of(who: Principal, action: Action, tenant: str | None) -> str | None:
    """The tenant `who` acts on: an admin the one it names (None: every tenant, for a
    read); anyone else with `action` its own (naming another is 404)."""
    who.require(action)
    if who.reach_of(action) == "all":
        return tenant
    if tenant is not None:
        who.require(action, tenant)
    return who.tenant


def _resource(view: DocumentView) -> str:
    """How the audit trail names a document."""
    return f"document:{view.tenant}/{view.collection}/{view.doc_id}"


def _record(view: DocumentView) -> dict[str, Any]:
    """What the audit's digest covers: the whole document, readers and body."""
    return view.model_dump(mode="json", exclude={"version"})


class Documents:
    def __init__(
        self, engine: AsyncEngine, *, ttl_s: float = 5.0, most: int = MAX_DOCUMENTS_PER_TENANT
    ) -> None:
        self.engine = engine
        self.store = DocumentStore(engine, most=most)
        self.ttl_s = ttl_s
        self._any: tuple[float, bool] | None = None
        self._rereading: asyncio.Task[None] | None = None

    # ---- whether retrieval is offered -----------------------------------------------

    async def refresh(self) -> None:
        """Read whether any document is stored (before serving, and when stale)."""
        self._any = (time.monotonic(), await self.store.any())

    def any(self) -> bool:
        """Whether any document is stored, as last read; asked at every step on the event
        loop, so an answer older than `ttl_s` is re-read in the background meanwhile
        (another replica's first document shows within `ttl_s`)."""
        if self._any is None or time.monotonic() - self._any[0] > self.ttl_s:
            self._reread()
        return self._any is not None and self._any[1]

    def _reread(self) -> None:
        if self._rereading is not None and not self._rereading.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): the last answer stands
            return
        self._rereading = loop.create_task(self._reread_now())

    async def _reread_now(self) -> None:
        try:
            await self.refresh()
        except Exception:  # the database is away: the last answer stands
            log.warning("could not read whether documents are stored", exc_info=True)

    # ---- the API ----------------------------------------------------------------------

    async def add(self, collection: str, body: AddDocument, who: Principal) -> DocumentView:
        tenant = scope_of(who, "documents.write", body.tenant) or who.tenant
        async with self.engine.begin() as conn:
            view = await self.store.add(
                conn,
                tenant=tenant,
                collection=collection,
                title=body.title,
                body=body.body,
                readers=body.readers,
                by=who.label,
            )
            await record_change(
                conn,
                "document.added",
                _resource(view),
                None,
                _record(view),
                who.label,
                tenant=tenant,
                sink=None,
            )
        self._any = (time.monotonic(), True)
        log.info("document %s added to %s/%s by %s", view.doc_id, tenant, collection, who.label)
        return view

    async def remove(
        self, collection: str, doc_id: str, tenant: str | None, who: Principal
    ) -> None:
        scope = scope_of(who, "documents.write", tenant)
        async with self.engine.begin() as conn:
            view = await self.store.remove(conn, scope, collection, doc_id)
            if view is None:
                raise NotFoundError(f"no document '{doc_id}' in collection '{collection}'")
            await record_change(
                conn,
                "document.removed",
                _resource(view),
                _record(view),
                None,
                who.label,
                tenant=view.tenant,
                sink=None,
            )
        self._any = None  # it may have been the last one: read again at the next step
        log.info("document %s removed from %s/%s by %s", doc_id, view.tenant, collection, who.label)

    async def get(
        self, collection: str, doc_id: str, tenant: str | None, who: Principal
    ) -> DocumentView:
        return await self.store.get(scope_of(who, "documents.read", tenant), collection, doc_id)

    async def listing(self, collection: str, tenant: str | None, who: Principal) -> DocumentList:
        """A collection's documents (404 when it holds none within reach: a collection
        exists while it holds a document)."""
        found = await self.store.listing(scope_of(who, "documents.read", tenant), collection)
        if not found:
            raise NotFoundError(f"no collection '{collection}'")
        return DocumentList(documents=found)

    async def collections(self, tenant: str | None, who: Principal) -> CollectionList:
        rows = await self.store.collections(scope_of(who, "documents.read", tenant))
        return CollectionList(
            collections=[CollectionSummary(tenant=t, collection=c, documents=n) for t, c, n in rows]
        )
