"""Documents on the wire: `/v1/collections/{collection}/documents` (add, list, show,
remove) and the collections a tenant has.

A document belongs to one tenant and one collection and names its `readers`: who may
retrieve it through `search_documents`. A reader is `role:<role>` (every principal of
the document's tenant with that role), `user:<name>` (one principal of that tenant, by
its name), or `*` (everyone of that tenant). No readers: nobody retrieves it (an
operator still lists it through the API)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest
from tether_common.messages.identity import ROLES

MAX_TITLE_CHARS = 300
# A document's tsvector must stay under PostgreSQL's 1 MiB; this many characters of
# text stay well below it whatever the words.
MAX_BODY_CHARS = 100_000
MAX_READERS = 100
MAX_QUERY_CHARS = 500
MAX_RESULTS = 10
EVERYONE = "*"
READER_PATTERN = (
    rf"^(\*|role:({'|'.join(ROLES)})|user:{ID_PATTERN.removeprefix('^').removesuffix('$')})$"
)
Reader = Annotated[str, Field(pattern=READER_PATTERN, max_length=205)]


class AddDocument(WireRequest):
    """`POST /v1/collections/{collection}/documents`: a new document. `tenant`: whose,
    for an admin (others always add to their own tenant)."""

    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)
    body: str = Field(min_length=1, max_length=MAX_BODY_CHARS)
    readers: list[Reader] = Field(default_factory=list, max_length=MAX_READERS)
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)


class DocumentSummary(WireModel):
    """A document as listed: everything but its body."""

    doc_id: str
    tenant: str
    collection: str
    title: str
    readers: list[str]
    chars: int
    created_by: str
    created_at: datetime


class DocumentView(DocumentSummary):
    body: str


class DocumentList(WireModel):
    """A collection's documents, newest first."""

    documents: list[DocumentSummary]


class CollectionSummary(WireModel):
    tenant: str
    collection: str
    documents: int


class CollectionList(WireModel):
    """The collections within the caller's reach (a collection exists while it holds a
    document)."""

    collections: list[CollectionSummary]
