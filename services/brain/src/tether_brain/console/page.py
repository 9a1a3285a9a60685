"""The console's one page, assembled at start from `static/` (HTML shell, stylesheet,
script) into a single document whose inline script and style the CSP admits by hash."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from tether_common.pages import page_headers

STATIC = Path(__file__).with_name("static")
# Where the shell takes the stylesheet and the script (inlined, so the page is one
# document and needs no other route).
STYLE_SLOT = "/*console.css*/"
SCRIPT_SLOT = "//console.js"


def assemble() -> str:
    shell = (STATIC / "console.html").read_text(encoding="utf-8")
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    assert shell.count(STYLE_SLOT) == 1
    assert shell.count(SCRIPT_SLOT) == 1
    # Neither file may close its own element early (a literal `</script>` would end the
    # block the hash covers).
    assert "</style" not in style
    assert "</script" not in script
    return shell.replace(STYLE_SLOT, style).replace(SCRIPT_SLOT, script)


def console_page_router() -> APIRouter:
    """`GET /console`: public like the approvals console's page, since a browser cannot
    send a bearer token when it navigates; the page asks for one and keeps it in the
    tab's sessionStorage. Runs are addressed in the fragment (`#/runs/<id>`), which never
    reaches a server."""
    router = APIRouter(tags=["console"])
    page = assemble()
    headers = page_headers(page)

    @router.get("/console", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
