"""The console's one page: the operator console (`tether_common.pages.console`) with its
runs and approvals views, a single document whose inline script and style the CSP
admits by hash."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from tether_common import pages


def assemble() -> str:
    """The page as this service serves it: both views, since the brain answers the runs
    API and the approvals routes the console needs (`console.approvals`)."""
    return pages.console(("runs", "approvals"))


def console_page_router() -> APIRouter:
    """`GET /console`: public like every page, since a browser cannot send a bearer token
    when it navigates; the page asks for one and keeps it in the tab's sessionStorage.
    Views are addressed in the fragment (`#/runs/<id>`, `#/approvals`), which never
    reaches a server."""
    router = APIRouter(tags=["console"])
    page = assemble()
    headers = pages.page_headers(page)

    @router.get("/console", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
