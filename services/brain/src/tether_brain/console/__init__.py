"""The operator console: a web page at `/console` with one sign-in for runs and
approvals. Runs: the list with filters and live updates; a run's timeline, usage, audit
state and trace link; approve or deny its parked calls; stop it; send it a message.
Approvals: every pending request the token may read, live, with the staged diff and the
quorum so far, decided with a note. Schedules: each one's next tick and last run
(`GET /v1/schedules`, read-only).

Owns serving the page (`page.py`; the app itself is `tether_common.pages.console`, which
the approvals service serves too) and the JSON routes the brain's API did not have
(`api.py`: a run's approvals and decisions, the console's settings; `approvals.py`: the
approvals routes the Approvals view needs, so the page talks to one origin). Everything
the page reads or does goes through the authenticated API with the token the operator
types in, so the page can do nothing its token could not do with curl.

Never: renders model or tool text as HTML (the page only ever sets text through the
shared kit), puts a token in a URL, or decides or lists approvals on its own authority:
every approvals call is forwarded with the caller's own token, which the approvals
service checks (role, tenant, team scope).
"""

from tether_brain.console.api import console_state
from tether_brain.console.api import router as api_router
from tether_brain.console.page import console_page_router

__all__ = ["api_router", "console_page_router", "console_state"]
