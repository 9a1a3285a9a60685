"""The operator's HTTP download of a whole output (bearer token), streamed chunk by chunk."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from tether_common.http import PathId, check_bearer
from tether_output_store.store import OutputStore


def outputs_router(store: OutputStore, token_hashes: frozenset[str]) -> APIRouter:
    router = APIRouter(prefix="/v1/outputs", tags=["outputs"])

    @router.get("/{ref}")
    async def download(
        ref: PathId, authorization: str | None = Header(default=None)
    ) -> StreamingResponse:
        check_bearer(authorization, token_hashes)
        stored = await store.describe(ref, None)

        async def body() -> AsyncIterator[bytes]:
            async with aclosing(store.iter_chunks(stored)) as pieces:
                async for piece in pieces:
                    yield piece

        return StreamingResponse(
            body(),
            media_type=stored.media_type,
            headers={"Content-Length": str(stored.size), "X-Content-SHA256": stored.sha256},
        )

    return router
