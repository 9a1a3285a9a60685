"""Tether's shared library: what two or more of the five services (or the client) must
agree on, and nothing only one of them uses.

It owns, bottom to top (the layers import-linter holds, `pyproject.toml`):

- `errors`: the one exception tree and the wire codes;
- `messages`: the versioned wire models, one module per conversation (with what they
  validate: `patterns`, `templating`, `typed_answers`); `metrics`: the shared instruments;
- `subjects`: every NATS subject, route and stream from one prefix, and each user's inbox
  prefix; `telemetry`: traces, metrics export and JSON logs;
- `bus`: the one way onto NATS; `http`: what every service's HTTP side shares; `db`: the
  async engine and migrations;
- `identity`: principals, tokens, tenants and the authorisation every service applies;
- `service`: the life of a service process (connect, migrate, serve, drain).

Beside the layers stand the shared domain pieces a service and the client both read
(`audit`, `decisions`, `safety`, `skills`, `digest`, `display`, `changetext`, `toolcalls`
…), `retrying`, the one retry policy of every retry, and `testing`, the fakes shipped
for tests. Settings shared by all are in `settings`.

It never holds a service's state, imports a service or the client, or carries what only
one process uses: `tether up`'s machinery is in `tether_client.server`, the object store in
the output-store, the brain's memo in the brain. A base install (no extra) is only what
the wire models need; the services install `tether-common[service]`.
"""
