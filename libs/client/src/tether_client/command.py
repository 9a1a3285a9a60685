"""The `tether` script's entry, and which extra each part of the command line needs.

A client-only install (`pip install tether-client`) has no command line: it needs the
`cli` extra (Typer, Rich…), and `tether up` the `server` one (the service stack; the
embedded NATS and PostgreSQL wheels unless `TETHER_NATS_URL` / `TETHER_DATABASE_URL`
name real ones). A missing extra is one line naming it and exit code 1
(`ExitCode.FAILED`), never an `ImportError` traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from tether_client.exits import ExitCode

__all__ = ["CLI_MODULES", "SERVER_MODULES", "main", "missing_extra"]

# What each extra brings that the base install lacks, by module name.
CLI_MODULES = ("typer", "rich", "yaml", "pydantic_settings")
SERVER_MODULES = ("nats", "sqlalchemy", "asyncpg", "fastapi", "uvicorn", "opentelemetry")


def missing_extra(extra: str, modules: Sequence[str]) -> str | None:
    """Why `extra` is needed and how to install it, when one of `modules` is absent."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return (
        f"tether: this needs the `{extra}` extra, which is not installed "
        f"(missing: {', '.join(absent)}). Install it with: pip install 'tether-client[{extra}]'"
    )


def main(argv: list[str] | None = None) -> int:
    """`tether`: the command line when the `cli` extra is installed."""
    if (why := missing_extra("cli", CLI_MODULES)) is not None:
        sys.stderr.write(why + "\n")
        return ExitCode.FAILED
    from tether_client.cli import main as cli_main  # only now: it imports the extra

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
