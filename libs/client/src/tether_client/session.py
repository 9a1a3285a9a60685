"""How a command talks to the system: its tokens, its client, and its event loop.

The operator token comes from `TETHER_OPERATOR_TOKEN` or `TETHER_HOME/operator-token`
(`tether up` writes it); calls to the brain carry `TETHER_TOKEN` when set, else the
operator token.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, ParamSpec

import typer

from tether_client.client import TetherClient
from tether_client.console import err
from tether_client.endpoints import api_url
from tether_client.exits import RUNS_LIST, Failure, describe
from tether_common.errors import AuthError
from tether_common.home import tether_home

__all__ = [
    "blocking",
    "client_token",
    "connect",
    "operator_token",
    "report",
    "required_token",
]

P = ParamSpec("P")


def operator_token() -> str | None:
    """The operator's bearer token, or None when none is configured."""
    if token := os.environ.get("TETHER_OPERATOR_TOKEN", "").strip():
        return token
    try:
        return (tether_home() / "operator-token").read_text().strip() or None
    except OSError:
        return None


def client_token() -> str | None:
    """The caller's bearer token for the brain: `TETHER_TOKEN` (a principal's token from
    `tether tokens create`), else the operator token."""
    return os.environ.get("TETHER_TOKEN", "").strip() or operator_token()


def required_token() -> str:
    token = operator_token()
    if token is None:
        raise AuthError(
            "no operator token: set TETHER_OPERATOR_TOKEN or write "
            f"{tether_home() / 'operator-token'}",
            code="no_token",
        )
    return token


def connect() -> TetherClient:
    """The brain's API as this user."""
    return TetherClient(api_url(), token=client_token())


def report(failure: Failure) -> NoReturn:
    """Say what went wrong in one line, with its hint, and exit with its code."""
    err(f"error: {failure.message}", "red")
    if failure.hint:
        err(f"hint: {failure.hint}", "dim")
    raise typer.Exit(failure.code)


def blocking(
    fn: Callable[P, Coroutine[Any, Any, int | None]], *, lists: str = RUNS_LIST
) -> Callable[P, None]:
    """An async command as the plain function Typer calls: its own event loop; its exit
    code (None: 0) and every expected failure (`exits.describe`; `lists` the command a
    not-found id's hint names) become `typer.Exit`."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = asyncio.run(fn(*args, **kwargs)) or 0
        except Exception as exc:
            failure = describe(exc, api_url(), lists=lists)
            if failure is None:
                raise  # a bug: its traceback is the useful report
            report(failure)
        if code:
            raise typer.Exit(code)

    return run
