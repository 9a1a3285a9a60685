"""Shell completion of ids from the server: run ids (and `last`) wherever a run is taken,
approval ids wherever an approval is (Typer's `autocompletion`, kubectl's completion of
resource names).

A completion is asked on every Tab, so it is one request with a short timeout, and it
is silent: a system that is down, a missing or wrong token, an answer it cannot read all
complete nothing, and never write a line into the shell (stderr included).

What it offers goes into the user's shell (zsh `eval`s the completion script's output),
and comes from the server: an id another tenant's run or a compromised service chose, a
prompt an admin's listing shows. So an id is offered only when it is made of the
characters ids are made of, and the description beside it keeps only plain characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import re
from collections.abc import Coroutine, Iterable
from typing import Any

__all__ = ["COMPLETE_TIMEOUT_S", "approval_ids", "offer", "run_ids"]

COMPLETE_TIMEOUT_S = 1.5  # the whole request: a Tab that hangs is worse than none
OFFERED = 100  # newest runs / pending approvals looked at
ID = re.compile(r"[A-Za-z0-9_]{1,100}")  # what run and approval ids are made of
NOT_PLAIN = re.compile(r"[^A-Za-z0-9 _.,/@+=-]+")  # in a description: shown as one space
DESCRIBED = 60  # characters of a description

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


def offer(found: Iterable[tuple[str, str]], incomplete: str, kind: str) -> list[Item]:
    """The (id, description) pairs whose id starts with `incomplete` (or with `kind_` +
    it), ids of another make dropped and descriptions made plain."""
    prefixes = (incomplete, f"{kind}_{incomplete}")
    return [
        (found_id, " ".join(NOT_PLAIN.sub(" ", said).split())[:DESCRIBED])
        for found_id, said in found
        if ID.fullmatch(found_id) and found_id.startswith(prefixes)
    ]


async def _runs(incomplete: str) -> list[Item]:
    from tether_client.client import TetherClient
    from tether_client.endpoints import api_url
    from tether_client.session import client_token

    token = client_token()
    async with TetherClient(api_url(), token=token or "", timeout=COMPLETE_TIMEOUT_S) as client:
        runs = (await client.list_runs(limit=OFFERED)).runs
    return offer(((r.run_id, f"{r.status} {r.prompt}") for r in runs), incomplete, "run")


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
    described = ((a.approval_id, f"{a.tool} in {a.run_id[:12]}") for a in pending)
    return offer(described, incomplete, "apr")


def _quietly(asking: Coroutine[Any, Any, list[Item]]) -> list[Item]:
    # Whatever goes wrong completes nothing: a Tab must not print into the shell, and
    # nothing here is worth a traceback (stderr is swallowed for log lines too).
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return asyncio.run(asyncio.wait_for(asking, COMPLETE_TIMEOUT_S))
        except Exception as exc:  # any failure: see above
            log.debug("no completion: %r", exc)
            return []
