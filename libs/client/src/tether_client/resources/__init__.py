"""`TetherClient`'s methods, one module per resource of the brain's HTTP API, each a
class on `core.ClientCore` (the connection, one request, its answer read as the route's
model, a refusal raised as its error class) that `TetherClient` inherits: `runs` (and
`events`, a run's event stream, which `runs` and `threads` follow), `threads`, `agents`,
`policy` (tools, explain, manual runs, audits), `tokens`, `kill`, `quotas`, `hooks`,
`documents`, `memory`, `schedules`.

A resource's wire models load with its first call (`TYPE_CHECKING` imports at the top),
so a command that lists runs does not build the agents' or threads' models. Nothing here
is public: callers use `tether_client.TetherClient` (or `SyncTetherClient`).
"""
