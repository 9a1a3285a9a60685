"""Documents for retrieval (`/v1/collections`): add one to a collection, list, read,
remove, and the collections within reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore, tenant_param

if TYPE_CHECKING:
    from tether_common.messages.documents import (
        AddDocument,
        CollectionList,
        DocumentList,
        DocumentView,
    )

__all__ = ["Documents"]


class Documents(ClientCore):
    """Collections of documents that runs retrieve from."""

    async def add_document(self, collection: str, body: AddDocument) -> DocumentView:
        """Add a document to a collection (operator; an admin names `body.tenant`); its
        `readers` say who `search_documents` retrieves it for."""
        from tether_common.messages.documents import DocumentView

        path = f"/v1/collections/{collection}/documents"
        return await self._call(DocumentView, "POST", path, body)

    async def documents(self, collection: str, *, tenant: str | None = None) -> DocumentList:
        """A collection's documents, newest first, without bodies (404: none)."""
        from tether_common.messages.documents import DocumentList

        path = f"/v1/collections/{collection}/documents"
        return await self._call(DocumentList, "GET", path, params=tenant_param(tenant))

    async def document(
        self, collection: str, doc_id: str, *, tenant: str | None = None
    ) -> DocumentView:
        from tether_common.messages.documents import DocumentView

        path = f"/v1/collections/{collection}/documents/{doc_id}"
        return await self._call(DocumentView, "GET", path, params=tenant_param(tenant))

    async def remove_document(
        self, collection: str, doc_id: str, *, tenant: str | None = None
    ) -> None:
        path = f"/v1/collections/{collection}/documents/{doc_id}"
        await self._send("DELETE", path, params=tenant_param(tenant))

    async def collections(self, *, tenant: str | None = None) -> CollectionList:
        """The collections within reach, with how many documents each holds."""
        from tether_common.messages.documents import CollectionList

        params = tenant_param(tenant)
        return await self._call(CollectionList, "GET", "/v1/collections", params=params)
