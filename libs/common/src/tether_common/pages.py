"""Static operator pages (the approvals console, the brain's runs console): one HTML
document that holds no data, served under a strict Content-Security-Policy that admits
only its own inline script and style (by hash), requests to its own origin, and no
framing, so nothing a model or a tool wrote can run in it and no other site can
clickjack its buttons."""

from __future__ import annotations

import base64
import hashlib
import re

__all__ = ["content_policy", "page_headers"]


def _hashes(page: str, tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
    digests = (base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in blocks)
    return " ".join(f"'sha256-{d}'" for d in digests)


def content_policy(page: str) -> str:
    """The page's CSP: its inline `<script>` and `<style>` blocks by hash, nothing else."""
    return (
        f"default-src 'none'; script-src {_hashes(page, 'script')}; "
        f"style-src {_hashes(page, 'style')}; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


def page_headers(page: str) -> dict[str, str]:
    """Every header such a page is served with: never cached (a signed-out tab must not
    come back from a cache), never framed, no referrer, no MIME sniffing."""
    return {
        "Cache-Control": "no-store",
        "Content-Security-Policy": content_policy(page),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
