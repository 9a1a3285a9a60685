"""Documents over HTTP: `GET /v1/collections`, `GET|POST
/v1/collections/{collection}/documents`, `GET|DELETE
/v1/collections/{collection}/documents/{doc_id}`. What each does, and who may, is
`tools.documents.Documents`'s; runs retrieve through `search_documents`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from tether_brain.api.deps import DocumentsDep
from tether_common.http import TEXT_BODY_LIMIT, PathId, body_limit
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN
from tether_common.messages.documents import (
    AddDocument,
    CollectionList,
    DocumentList,
    DocumentView,
)

# Which tenant an admin means (others always mean their own; none: every tenant's).
TenantQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]


router = APIRouter(prefix="/v1", tags=["documents"])


@router.get("/collections")
async def collections(
    documents: DocumentsDep, who: Caller, tenant: TenantQuery = None
) -> CollectionList:
    """The collections within reach and how many documents each holds."""
    return await documents.collections(tenant, who)


@router.get("/collections/{collection}/documents")
async def listing(
    collection: PathId, documents: DocumentsDep, who: Caller, tenant: TenantQuery = None
) -> DocumentList:
    """A collection's documents, newest first, without their bodies (404: none)."""
    return await documents.listing(collection, tenant, who)


@router.post(
    "/collections/{collection}/documents",
    status_code=201,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
)
async def add(
    collection: PathId, body: AddDocument, documents: DocumentsDep, who: Caller
) -> DocumentView:
    """Add a document; its `readers` say who may retrieve it (none: nobody)."""
    return await documents.add(collection, body, who)


@router.get("/collections/{collection}/documents/{doc_id}")
async def show(
    collection: PathId,
    doc_id: PathId,
    documents: DocumentsDep,
    who: Caller,
    tenant: TenantQuery = None,
) -> DocumentView:
    """One document with its readers and body (404: none within reach)."""
    return await documents.get(collection, doc_id, tenant, who)


@router.delete("/collections/{collection}/documents/{doc_id}", status_code=204)
async def remove(
    collection: PathId,
    doc_id: PathId,
    documents: DocumentsDep,
    who: Caller,
    tenant: TenantQuery = None,
) -> Response:
    """Remove a document: no run retrieves it any more (404: none within reach)."""
    await documents.remove(collection, doc_id, tenant, who)
    return Response(status_code=204)
