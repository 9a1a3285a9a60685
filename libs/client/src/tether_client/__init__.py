"""Tether's Python client (HTTP) and the `tether` command line.

The CLI, the tests and other services use `TetherClient`; it speaks only the public API.
"""

from tether_client.client import TetherClient

__all__ = ["TetherClient"]
