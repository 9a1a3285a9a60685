"""Tether's Python client (HTTP) and the `tether` command line.

`TetherClient` (async) and `SyncTetherClient` (the same methods, blocking) speak only the
brain's public API and answer typed models (`tether_common.messages`); refusals raise the
`tether_common.errors` class of their code. A base install (`pip install tether-client`)
is just the client; the command line needs the `cli` extra, `tether up` the `server` one.
The command line (Typer + Rich) is `cli` (root, `main`), one `*_cli` module per command
group, `console` (output formats, safe text), `exits` (exit codes and hints), `session`
(tokens, the event loop), `endpoints` (where the services are), `runref` (run prefixes and
`last`), `status` and `up`.
"""

from tether_client.client import TetherClient
from tether_client.sync import SyncTetherClient

__all__ = ["SyncTetherClient", "TetherClient"]
