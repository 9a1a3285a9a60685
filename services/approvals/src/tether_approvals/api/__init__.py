"""The approvals service's faces: the operator API over HTTP (approvals and their event
stream, the audit check, webhook endpoints, the console's address) and the bus handlers
the brain calls. Each route or handler takes the caller, decodes, calls one domain
method and encodes; what a route needs is on `app.state` (`api.deps`).

Never writes a row or decides anything itself: `decisions` and `notices` do.
"""
