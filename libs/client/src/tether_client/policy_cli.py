"""`tether policy replay` and `tether policy suggest`: policy what-if over an agent's
recorded calls, through the brain's `POST /v1/policy/replay|suggest` (the caller's token
needs `policy.read` on the agent's tenant). Nothing is changed by either.

    tether policy replay -f agent.yaml --since 7d [--until 1d] [--agent ID] [--json]
    tether policy suggest --agent ID --since 7d [-o yaml]

A time is a duration before now (`30m`, `12h`, `7d`, `2w`) or an ISO 8601 time (UTC when
it names no zone). The file is an agent as `tether agents apply` takes it (its `id`
names the agent unless `--agent` does); a top-level `guardrails` mapping stands for the
organisation's rules in force.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
import yaml
from rich.console import Group
from rich.text import Text

from tether_client.agents_cli import read_document
from tether_client.client import TetherClient, raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, safe
from tether_client.session import blocking, connect
from tether_common.errors import MessageError
from tether_common.messages.policy_replay import ReplayReport, Suggestion

__all__ = ["PolicyApi", "replay_command", "suggest_command", "when"]

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_META = ("id", "version", "source", "changed_by", "changed_at", "guardrails")

Since = Annotated[
    str,
    typer.Option(help="From: a duration before now (7d, 12h) or an ISO time.", show_default=False),
]
Until = Annotated[
    str | None, typer.Option(help="To (default now): a duration before now or an ISO time.")
]


def when(text: str, now: datetime | None = None) -> datetime:
    """A duration before `now` (`7d`) or an ISO 8601 time (UTC when it names no zone)."""
    now = now or datetime.now(UTC)
    if found := re.fullmatch(r"\s*(\d{1,6})\s*([smhdw])\s*", text):
        return now - timedelta(**{_UNITS[found[2]]: int(found[1])})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise MessageError(
            f"'{text}' is neither a duration (30m, 12h, 7d, 2w) nor an ISO time",
            code="invalid_request",
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def window(since: str, until: str | None) -> dict[str, str]:
    now = datetime.now(UTC)
    found = {"since": when(since, now).isoformat()}
    return found if until is None else found | {"until": when(until, now).isoformat()}


class PolicyApi:
    """The brain's policy what-if routes over the client's connection."""

    def __init__(self, client: TetherClient) -> None:
        self.http = client._http

    async def replay(self, body: dict[str, Any]) -> ReplayReport:
        response = await self.http.post("/v1/policy/replay", json=body)
        raise_for_error(response)
        return ReplayReport.model_validate(response.json())

    async def suggest(self, body: dict[str, Any]) -> Suggestion:
        response = await self.http.post("/v1/policy/suggest", json=body)
        raise_for_error(response)
        return Suggestion.model_validate(response.json())


def _arguments(args: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= 60 else text[:59] + "…"


def replay_view(found: ReplayReport) -> Group:
    head = Text(
        safe(
            f"{found.agent}: {found.calls} calls in {found.runs} runs, {found.changed} would change"
            + ("" if found.complete else f" (more runs: ask again --since {found.next_since})")
        )
    )
    counts = rows_table(
        ["TOOL", "TRANSITION", "CALLS"],
        [(t, tr, n) for t, by in found.by_tool.items() for tr, n in sorted(by.items())],
    )
    calls = rows_table(
        ["WHEN", "TOOL", "ARGUMENTS", "BEFORE", "AFTER", "OUTCOME", "BY", "WHY"],
        [
            (
                c.at.strftime("%Y-%m-%d %H:%M"),
                c.tool,
                _arguments(c.arguments),
                c.before,
                c.after + (f" (quorum {c.quorum})" if c.quorum else ""),
                c.outcome,
                c.decided_by,
                c.code,
            )
            for c in found.changes
        ],
    )
    parts: list[Any] = [head, counts, Text(""), calls]
    if found.truncated:
        parts.append(Text(f"(first {len(found.changes)} listed; --limit shows more)"))
    if found.skipped:
        parts.append(Text(f"not re-decided: {found.skipped}"))
    return Group(*parts)


@blocking
async def replay_command(
    file: Annotated[
        str, typer.Option("--file", "-f", help="The proposed agent (YAML or JSON; - for stdin).")
    ],
    since: Since,
    until: Until = None,
    agent: Annotated[str | None, typer.Option(help="The agent (default: the file's id).")] = None,
    limit: Annotated[int, typer.Option(help="List at most this many changed calls.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="The answer as JSON.")] = False,
    output: OutputOption = Format.table,
) -> int:
    """Decide the agent's recorded calls again under a proposed policy; show what would
    change (allowed -> ask, ask -> allowed, denied -> allowed, ...). Nothing is changed.

    Example: tether policy replay -f agent.yaml --since 7d
    """
    document = read_document(file)
    proposal = {k: v for k, v in document.items() if k not in _META}
    body = {"agent": agent or document["id"], "proposal": proposal, "limit": limit}
    if "guardrails" in document:
        body["guardrails"] = document["guardrails"]
    async with connect() as client:
        found = await PolicyApi(client).replay(body | window(since, until))
    emit(found, Format.json if as_json else output, replay_view(found))
    return 0


def suggestion_yaml(found: Suggestion) -> str:
    """The suggested grants as YAML, the diff against those in force as comments."""
    lines = [f"# {found.agent}: {found.wanted} allowed or approved, {found.refused} denied calls"]
    lines += [f"# + {g}" for g in found.added] + [f"# - {g}" for g in found.removed]
    lines += [f"# ~ {n.entry} -> {', '.join(n.to)}" for n in found.narrowed]
    lines += [f"# ! not covered: {u.tool} call {u.call_id} ({u.why})" for u in found.uncovered]
    lines += [f"# ! {p}" for p in found.problems]
    verdict = "verified by replay" if found.verified else "NOT verified"
    lines.append(f"# {verdict}; never applied: use `tether agents apply`")
    return "\n".join(lines) + "\n" + yaml.safe_dump({"grants": found.grants}, sort_keys=False)


@blocking
async def suggest_command(
    agent: Annotated[str, typer.Option(help="The agent.", show_default=False)],
    since: Since,
    until: Until = None,
    output: OutputOption = Format.table,
) -> int:
    """The narrowest grants the agent's recorded calls needed, as a diff against its
    grants in force (+ added, - removed, ~ narrowed). Never applied.

    Example: tether policy suggest --agent writer --since 7d
    """
    async with connect() as client:
        found = await PolicyApi(client).suggest({"agent": agent} | window(since, until))
    emit(found, output, suggestion_yaml(found))
    return 0
