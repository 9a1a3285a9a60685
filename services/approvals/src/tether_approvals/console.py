"""The operator console: one static page (no build step, no CDN). The page itself holds
no data; it asks for a token and then uses the authenticated API.

The page is served with a strict Content-Security-Policy: only its own inline script and
style (allowed by hash), requests to this origin only, and no framing, so the approve
buttons cannot be clickjacked from another site.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from tether_common import pages

PAGE = Path(__file__).with_name("console.html")


def console_router() -> APIRouter:
    router = APIRouter(tags=["console"])
    page = pages.assemble(PAGE.read_text(encoding="utf-8"), {})  # the shared script kit
    headers = pages.page_headers(page)

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
