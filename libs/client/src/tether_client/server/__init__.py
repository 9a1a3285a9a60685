"""`tether up`'s machinery, installed with the `server` extra: the embedded NATS and
PostgreSQL (`embedded`), the supervisor that starts the five services as child processes
(`supervisor`), the locked-down bus's nats-server configuration generated from the subject
declarations (`natsauth`; `python -m tether_client.server.natsauth --env-passwords`, or
`make nats-config`, writes the committed one), and the 0600 secret files of `TETHER_HOME`
(`secretfiles`). `testing` holds the suite's harnesses built on them (a locked nats-server,
a two-tenant world, network namespaces).

No service process imports this package: the services only get what these modules start.
Importing the package itself loads nothing; each module is imported where it is used.
"""
