"""Tether's Python client (HTTP) and the `tether` command line.

The CLI, the tests and other services use `TetherClient`; it speaks only the public API.
The command line (Typer + Rich) is `cli` (root, `main`), one `*_cli` module per command
group, `console` (output formats, safe text), `exits` (exit codes and hints), `session`
(tokens, the event loop), `endpoints` (where the services are), `runref` (run prefixes and
`last`), `status` and `up`.
"""

from tether_client.client import TetherClient

__all__ = ["TetherClient"]
