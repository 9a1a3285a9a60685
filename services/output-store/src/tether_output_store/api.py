"""The HTTP download of a whole output, streamed chunk by chunk, for a principal whose
`outputs.read` reaches every run (an admin).

Outputs follow their runs, and this service does not know whose run made an output:
anyone else downloads through the brain (`GET /v1/runs/{run_id}/outputs/{ref}`), which
checks the run first. Here such a caller gets 404, as for an output that does not exist."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from tether_common.errors import NotFoundError
from tether_common.http import PathId
from tether_common.identity.http import Caller
from tether_output_store.store import OutputStore

# The store's name on `app.state` (app.py puts it there).
OUTPUT_STORE = "output_store"


async def output_store(request: Request) -> OutputStore:
    found: OutputStore = getattr(request.app.state, OUTPUT_STORE)
    return found


router = APIRouter(prefix="/v1/outputs", tags=["outputs"])


@router.get("/{ref}")
async def download(
    ref: PathId, store: Annotated[OutputStore, Depends(output_store)], who: Caller
) -> StreamingResponse:
    who.require("outputs.read")
    if who.reach_of("outputs.read") != "all":
        raise NotFoundError(
            f"no output '{ref}' here: download it through the brain, "
            "GET /v1/runs/<run_id>/outputs/<ref>"
        )
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
