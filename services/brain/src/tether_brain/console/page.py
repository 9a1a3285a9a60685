"""The console's one page, assembled at start from `static/` (HTML shell, stylesheet,
script) and the shared script kit into a single document whose inline script and style
the CSP admits by hash (`tether_common.pages`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from tether_common import pages

STATIC = Path(__file__).with_name("static")


def assemble() -> str:
    """The page: the HTML shell with the stylesheet and the script inlined (one document,
    no other route), the script starting with the shared kit."""
    return pages.assemble(
        (STATIC / "console.html").read_text(encoding="utf-8"),
        {
            "/*console.css*/": (STATIC / "console.css").read_text(encoding="utf-8"),
            "//console.js": (STATIC / "console.js").read_text(encoding="utf-8"),
        },
    )


def console_page_router() -> APIRouter:
    """`GET /console`: public like the approvals console's page, since a browser cannot
    send a bearer token when it navigates; the page asks for one and keeps it in the
    tab's sessionStorage. Runs are addressed in the fragment (`#/runs/<id>`), which never
    reaches a server."""
    router = APIRouter(tags=["console"])
    page = assemble()
    headers = pages.page_headers(page)

    @router.get("/console", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
