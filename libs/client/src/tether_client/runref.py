"""Run references: a full run id, a unique prefix of one (with or without `run_`), or
`last` (the caller's newest run), resolved against the runs the caller's token may list
(so a prefix never reveals another tenant's runs); and what a prefix that matched none or
several says (`one_of`, approval references' too)."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from tether_client.client import TetherClient
from tether_client.complete import run_ids
from tether_common.errors import MessageError, NotFoundError

__all__ = ["REF_CHARS", "RunRef", "one_of", "resolve_run_id", "short"]

FULL_RUN_ID = re.compile(r"run_[0-9a-f]{32}")
# What can only be the start of a run id: anything else (`manual:…`, a whole id of another
# shape) is passed on whole, for the service to find or not.
RUN_ID_PREFIX = re.compile(r"r|ru|run|run_[0-9a-f]{0,31}|[0-9a-f]{1,31}")
REF_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")
SCAN_PAGE = 500
SCAN_MAX = 5000  # runs looked at to resolve a prefix (newest first)
SHORT = 12  # characters of a run id shown in hints (`run_` + 8)
LISTED = 8  # matches named when a prefix is ambiguous

RunRef = Annotated[
    str,
    typer.Argument(
        help="A run id, a unique prefix of one (e.g. run_3fa2 or 3fa2), or `last`.",
        metavar="RUN",
        show_default=False,
        autocompletion=run_ids,
    ),
]


def short(run_id: str) -> str:
    return run_id[:SHORT]


async def resolve_run_id(client: TetherClient, ref: str) -> str:
    """The run `ref` names among the caller's runs: a full id as is, `last` as the newest,
    else the one run whose id starts with it (or with `run_` + it)."""
    ref = ref.strip()
    if FULL_RUN_ID.fullmatch(ref):
        return ref
    if not REF_CHARS.fullmatch(ref):
        raise MessageError(f"{ref!r} is not a run id, a prefix of one, or `last`")
    if ref == "last":
        newest = (await client.list_runs(limit=1)).runs
        if not newest:
            raise NotFoundError("you have no runs yet", code="not_found")
        return newest[0].run_id
    if not RUN_ID_PREFIX.fullmatch(ref):
        return ref
    return one_of(ref, await _matching(client, ref), "run")


def one_of(ref: str, found: list[str], noun: str, *, more: bool = False) -> str:
    """The one id a prefix `ref` matched among `found` (`more`: there are others past
    them); none is `NotFoundError`, several an `ambiguous_id` naming them."""
    if len(found) == 1 and not more:
        return found[0]
    if not found:
        raise NotFoundError(f"no {noun} of yours starts with {ref!r}", code="not_found")
    listed = ", ".join(found[:LISTED]) + (" …" if more or len(found) > LISTED else "")
    count = f"{len(found)}{' or more' if more else ''}"
    raise MessageError(
        f"{ref!r} matches {count} {noun}s: {listed}; type more of the id",
        code="ambiguous_id",
    )


async def _matching(client: TetherClient, ref: str) -> list[str]:
    prefixes = (ref,) if ref.startswith("run_") else (ref, f"run_{ref}")
    found: list[str] = []
    before = None
    for _ in range(SCAN_MAX // SCAN_PAGE):
        page = (await client.list_runs(before=before, limit=SCAN_PAGE)).runs
        found += [r.run_id for r in page if r.run_id.startswith(prefixes)]
        if len(page) < SCAN_PAGE:
            break
        before = page[-1].created_at
    return found
