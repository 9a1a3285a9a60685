"""The runs console: a web page at `/console` where operators watch runs and steer them
(list with filters and live updates; a run's timeline, usage, audit state and trace
link; approve or deny its parked calls; stop it; send it a message).

Owns the page (`page.py`: one static document, no data in it, strict CSP) and the few
JSON routes the brain's API did not have (`api.py`: a run's approvals and decisions,
the console's settings). Everything else the page reads or does goes through the
existing authenticated API with the token the operator types in, so the page can do
nothing its token could not do with curl.

Never: renders model or tool text as HTML (the page only ever sets `textContent`), puts
a token in a URL, or decides an approval on its own authority: a decision is forwarded
with the caller's own token, which the approvals service checks (`approvals.decide`).
"""

from tether_brain.console.api import console_api_router
from tether_brain.console.page import console_page_router

__all__ = ["console_api_router", "console_page_router"]
