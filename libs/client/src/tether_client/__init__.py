"""Tether's Python client (HTTP) and the `tether` command line.

`TetherClient` (async) and `SyncTetherClient` (the same methods, blocking) speak only the
brain's public API and answer typed models (`tether_common.messages`); refusals raise the
`tether_common.errors` class of their code. `TetherClient`'s methods live in `resources`,
one module per resource of the API (runs, threads, agents …) on one core; `sync` makes
each a blocking method. A base install (`pip install tether-client`)
is just the client; the command line needs the `cli` extra, `tether up` the `server` one.
The command line (Typer + Rich) is `cli` (root, `main`), `lazy` (commands imported when
used), one `*_cli` module per command group, `console` (output formats, safe text, field
selection), `exits` (exit codes and hints), `session` (tokens, the event loop), `endpoints`
(where the services are), `runref` (run prefixes and `last`), `status` and `up`; `up`
starts what `server` holds (the `server` extra: embedded NATS and PostgreSQL, the
supervisor, the generated NATS configuration).

The two clients are imported on first use (PEP 562), so a command that needs neither
(`tether --help`) does not pay for httpx and the wire models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether_client.client import TetherClient
    from tether_client.sync import SyncTetherClient

__all__ = ["SyncTetherClient", "TetherClient"]


def __getattr__(name: str) -> Any:
    if name == "TetherClient":
        from tether_client.client import TetherClient

        return TetherClient
    if name == "SyncTetherClient":
        from tether_client.sync import SyncTetherClient

        return SyncTetherClient
    raise AttributeError(f"module 'tether_client' has no attribute {name!r}")
