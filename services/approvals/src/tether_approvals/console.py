"""The operator console: one static page (no build step, no CDN). The page itself holds
no data; it asks for a token and then uses the authenticated API.

The page is served with a strict Content-Security-Policy: only its own inline script and
style (allowed by hash), requests to this origin only, and no framing, so the approve
buttons cannot be clickjacked from another site.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

PAGE = Path(__file__).with_name("console.html")


def _hashes(page: str, tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    digests = (base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in blocks)
    return " ".join(f"'sha256-{d}'" for d in digests)


def content_policy(page: str) -> str:
    return (
        f"default-src 'none'; script-src {_hashes(page, 'script')}; "
        f"style-src {_hashes(page, 'style')}; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


def console_router() -> APIRouter:
    router = APIRouter(tags=["console"])
    page = PAGE.read_text(encoding="utf-8")
    headers = {
        "Cache-Control": "no-store",
        "Content-Security-Policy": content_policy(page),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
    }

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def console() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
