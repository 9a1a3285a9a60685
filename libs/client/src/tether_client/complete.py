"""Shell completion of ids from the server: run ids (and `last`) wherever a run is taken,
approval ids wherever an approval is (Typer's `autocompletion`, kubectl's completion of
resource names).

A completion is asked on every Tab, so it is one request with a short timeout, and it
is silent: a system that is down, a missing or wrong token, an answer it cannot read all
complete nothing, and never write a line into the shell (stderr included).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["COMPLETE_TIMEOUT_S", "approval_ids", "run_ids"]

COMPLETE_TIMEOUT_S = 1.5  # the whole request: a Tab that hangs is worse than none
OFFERED = 100  # newest runs / pending approvals looked at

log = logging.getLogger(__name__)

Item = tuple[str, str]  # (the id, what zsh and fish show beside it)


def run_ids(incomplete: str) -> list[Item]:
    """The caller's newest runs whose id starts with `incomplete` (or with `run_` + it),
    and `last`."""
    found = _quietly(_runs(incomplete))
    if "last".startswith(incomplete):
        found.insert(0, ("last", "your newest run"))
    return found


def approval_ids(incomplete: str) -> list[Item]:
    """The pending approval requests (operator token) whose id starts with `incomplete`
    (or with `apr_` + it)."""
    return _quietly(_approvals(incomplete))


def _matches(found: str, incomplete: str, kind: str) -> bool:
    return found.startswith(incomplete) or found.startswith(f"{kind}_{incomplete}")


async def _runs(incomplete: str) -> list[Item]:
    from tether_client.client import TetherClient
    from tether_client.endpoints import api_url
    from tether_client.session import client_token

    token = client_token()
    async with TetherClient(api_url(), token=token or "", timeout=COMPLETE_TIMEOUT_S) as client:
        runs = (await client.list_runs(limit=OFFERED)).runs
    return [
        (r.run_id, f"{r.status}: {' '.join(r.prompt.split())[:50]}")
        for r in runs
        if _matches(r.run_id, incomplete, "run")
    ]


async def _approvals(incomplete: str) -> list[Item]:
    from tether_client.approvals_api import ApprovalsClient
    from tether_client.endpoints import approvals_url
    from tether_client.session import operator_token

    token = operator_token()
    if token is None:
        return []
    client = ApprovalsClient(approvals_url(), token, timeout=COMPLETE_TIMEOUT_S)
    async with client:
        pending = await client.list("pending", limit=OFFERED)
    return [
        (a.approval_id, f"{a.tool} (run {a.run_id[:12]})")
        for a in pending
        if _matches(a.approval_id, incomplete, "apr")
    ]


def _quietly(asking: Coroutine[Any, Any, list[Item]]) -> list[Item]:
    # Whatever goes wrong completes nothing: a Tab must not print into the shell, and
    # nothing here is worth a traceback (stderr is swallowed for log lines too).
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return asyncio.run(asyncio.wait_for(asking, COMPLETE_TIMEOUT_S))
        except Exception as exc:  # any failure: see above
            log.debug("no completion: %r", exc)
            return []
