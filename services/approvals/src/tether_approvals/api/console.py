"""The operator console's address on this service: `/` and `/console` lead to the one
console (the brain's, runs and approvals, one sign-in) when its address is configured
(`TETHER_APPROVALS_CONSOLE_URL`; `tether up` sets it), opened at the Approvals view and
at the request a notice's link names (`/?approval=apr_…`). Without it, this service
serves the same console itself with the Approvals view only (`tether_common.pages`): a
deployment of the approvals service alone still has its page.

The page is served with a strict Content-Security-Policy: only its own inline script and
style (allowed by hash), requests to this origin only, and no framing, so the approve
buttons cannot be clickjacked from another site.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tether_approvals.api.deps import ConsoleUrl
from tether_common import pages
from tether_common.messages.base import ID_PATTERN

PATHS = ("/", "/console")
# Like a page's: never cached, no referrer.
REDIRECT_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def assemble() -> str:
    """The console as this service serves it: the Approvals view alone."""
    return pages.console(("approvals",))


def console_target(console_url: str, approval_id: str | None) -> str:
    """Where the unified console shows the Approvals view (and the one request): an id
    goes in the fragment, which the browser keeps and never sends to a server."""
    return f"{console_url}#/approvals" + (f"/{approval_id}" if approval_id else "")


router = APIRouter(tags=["console"])


@cache
def served() -> tuple[str, dict[str, str]]:
    """The page and its headers, assembled once per process (its parts ship with the code)."""
    page = assemble()
    return page, pages.page_headers(page)


async def console(
    console_url: ConsoleUrl,
    approval: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)] = None,
) -> Response:
    if console_url is None:
        page, headers = served()
        return HTMLResponse(page, headers=headers)
    target = console_target(console_url, approval)
    return RedirectResponse(target, status_code=303, headers=REDIRECT_HEADERS)


for path in PATHS:
    router.add_api_route(path, console, methods=["GET"], include_in_schema=False)
