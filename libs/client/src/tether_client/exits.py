"""The `tether` exit codes, and each failure as one line with a hint instead of a traceback.

code  meaning
0     done (a run completed, a check passed)
1     failed: the run did not complete, the tool failed, a check found problems
2     usage: a bad argument or a request the service refused as invalid
3     not reachable: nothing answers at the API's address (is `tether up` running?)
4     auth: no token, a wrong, revoked or expired one, or a role that may not do this
5     not found: no such run, approval, agent, token… (for you)
6     conflict: already decided, spent, changed by someone else (a stale version), a quota
7     waiting: an approval is needed first
8     refused: the gates or a safety rule said no
130   interrupted (Ctrl-C); a followed run goes on
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from tether_common.errors import (
    AuthError,
    BusError,
    ConfigError,
    ConflictError,
    MessageError,
    NotFoundError,
    QuotaExceededError,
    SafetyError,
    TetherError,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["EXIT_CODES_HELP", "RUNS_LIST", "ExitCode", "Failure", "describe"]

RUNS_LIST = "tether runs list"


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    AUTH = 4
    NOT_FOUND = 5
    CONFLICT = 6
    WAITING = 7
    REFUSED = 8
    INTERRUPTED = 130


# The same table for `tether --help` (one fact, the module docstring, in two places would
# drift: this is built from the docstring).
_TABLE_LINE = re.compile(r"\s*(code|\d+)\s{2,}\S")
EXIT_CODES_HELP = "Exit codes:\n\n" + "\n".join(
    line.strip() for line in (__doc__ or "").splitlines() if _TABLE_LINE.match(line)
)


@dataclass(frozen=True, slots=True)
class Failure:
    """What the CLI says when a command cannot go on: one line, a hint, an exit code."""

    code: ExitCode
    message: str
    hint: str | None = None


_AUTH_HINTS = {
    "no_token": "run `tether up` on this machine (it writes the operator token), "
    "or set TETHER_TOKEN",
    "unauthenticated": "the token is wrong or revoked: check TETHER_TOKEN or "
    "TETHER_OPERATOR_TOKEN (`tether tokens create` makes one)",
    "token_expired": "the token has expired: ask an admin for a new one (`tether tokens create`)",
    "forbidden": "your token's role may not do this: use an operator or admin token",
}


def _quota_hint(exc: QuotaExceededError) -> str:
    """When to try again, and where the quota's use is shown."""
    tenant = (exc.details or {}).get("tenant")
    show = f"`tether quota show {tenant}`" if isinstance(tenant, str) else "`tether quota show`"
    wait = f"retry in {exc.retry_after:g} s; " if exc.retry_after is not None else ""
    return f"{wait}{show} shows the quota and its use"


def _of_tether(exc: TetherError, lists: str) -> Failure:
    message = f"{exc.code}: {exc.message}"
    match exc:
        case AuthError():
            return Failure(ExitCode.AUTH, message, _AUTH_HINTS.get(exc.code))
        case NotFoundError():
            return Failure(ExitCode.NOT_FOUND, message, f"check the id (`{lists}`)")
        case ConflictError() if exc.code == "killed":
            return Failure(ExitCode.CONFLICT, message, "`tether kill --list` shows the kill switch")
        case QuotaExceededError():
            return Failure(ExitCode.CONFLICT, message, _quota_hint(exc))
        case ConflictError():
            return Failure(ExitCode.CONFLICT, message, "read it again and retry if still wanted")
        case MessageError() | ConfigError():
            return Failure(ExitCode.USAGE, message, "see `--help` for this command")
        case SafetyError():
            return Failure(ExitCode.REFUSED, message, "`tether policy explain` says why")
        case BusError() if exc.retryable:
            return Failure(ExitCode.UNREACHABLE, message, "the system is busy or starting: retry")
        case _:
            return Failure(ExitCode.FAILED, message)


def _origin(exc: httpx.RequestError, fallback: str) -> str:
    try:
        url = exc.request.url
    except RuntimeError:  # raised before a request was built
        return fallback
    return f"{url.scheme}://{url.netloc.decode()}"


def describe(exc: BaseException, api_url: str, *, lists: str = RUNS_LIST) -> Failure | None:
    """The failure to report for `exc`; None when it is not an expected one (a bug: let it
    show its traceback). `api_url` names the place when the error does not; `lists`, the
    command that lists what the command's ids name (the hint when one is not found)."""
    import httpx  # here, not at the top: `tether --help` needs this module but not httpx

    where = _origin(exc, api_url) if isinstance(exc, httpx.RequestError) else api_url
    if isinstance(exc, TetherError):
        return _of_tether(exc, lists)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Failure(
            ExitCode.UNREACHABLE,
            f"cannot reach Tether at {where}",
            "is it running? start it with `tether up` (or set TETHER_API_URL)",
        )
    if isinstance(exc, httpx.TimeoutException):
        return Failure(ExitCode.UNREACHABLE, f"{where} did not answer in time", "retry")
    if isinstance(exc, httpx.TransportError):
        return Failure(ExitCode.UNREACHABLE, f"connection to {where} failed: {exc}", "retry")
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return Failure(ExitCode.USAGE, f"bad address {where}: {exc}", "check TETHER_API_URL")
    return None
