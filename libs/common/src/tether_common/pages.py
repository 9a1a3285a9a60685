"""Static operator pages: one HTML document that holds no data, assembled at start from
its parts and the shared script kit (`page_kit.js`), and served under a strict
Content-Security-Policy that admits only its own inline script and style (by hash),
requests to its own origin, and no framing, so nothing a model or a tool wrote can run
in it and no other site can clickjack its buttons.

The operator console (`console/`: runs, approvals and schedules, one sign-in) is such a
page: the brain serves it with every view, the approvals service (when no console
address is configured) with the Approvals view alone. Both assemble it here, so it is one app."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from tether_common import display

__all__ = [
    "CONSOLE",
    "KIT_SLOT",
    "ConsoleView",
    "assemble",
    "console",
    "content_policy",
    "kit",
    "page_headers",
]

KIT = Path(__file__).with_name("page_kit.js")
CONSOLE = Path(__file__).with_name("console")
# The console's views; the page shows the ones its server answers the API of.
ConsoleView = Literal["runs", "approvals"]
# Where a page's script takes the kit.
KIT_SLOT = "//page_kit.js"
# Where the kit takes the class of code points it shows escaped (`tether_common.display`).
INVISIBLE_SLOT = '"%INVISIBLE%"'


def kit(source: Path = KIT) -> str:
    """The shared script kit, with the escaped class from its one definition."""
    text = source.read_text(encoding="utf-8")
    if text.count(INVISIBLE_SLOT) != 1:
        raise ValueError(
            f"the kit has {text.count(INVISIBLE_SLOT)} slots {INVISIBLE_SLOT}, not one"
        )
    return text.replace(INVISIBLE_SLOT, json.dumps(display.js_pattern()))


def assemble(shell: str, parts: Mapping[str, str]) -> str:
    """`shell` with each slot (a marker such as `//console.js`) replaced by its part, and
    `KIT_SLOT` by the kit. Each slot appears exactly once, and no part may close its
    element early (a literal `</script>` would end the block its hash covers)."""
    page = shell
    # The kit last: its slot may be inside a part.
    for slot, text in {**parts, KIT_SLOT: kit()}.items():
        if page.count(slot) != 1:
            raise ValueError(f"the page has {page.count(slot)} slots {slot!r}, not one")
        if re.search(r"</(script|style)", text, flags=re.IGNORECASE):
            raise ValueError(f"the part for {slot!r} closes its element")
        page = page.replace(slot, text)
    return page


def console(views: tuple[ConsoleView, ...]) -> str:
    """The operator console with `views` (`<body data-views>`): its HTML shell with the
    stylesheet and the scripts inlined, the script starting with the kit."""
    if not views:
        raise ValueError("a console shows at least one view")

    def part(name: str) -> str:
        return (CONSOLE / name).read_text(encoding="utf-8")

    return assemble(
        part("console.html"),
        {
            "%VIEWS%": " ".join(views),
            "/*console.css*/": part("console.css"),
            "//console.js": part("console.js"),  # holds the slots of the two below
            "//runs.js": part("runs.js"),
            "//approvals.js": part("approvals.js"),
            "//schedules.js": part("schedules.js"),
        },
    )


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
