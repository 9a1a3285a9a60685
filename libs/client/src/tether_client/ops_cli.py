"""Operator commands of `tether`: `approvals list|show|approve|deny|edit|respond`, `audit verify RUN`,
and the approval card `tether run` offers inline on a terminal (or, where nobody here can
answer, the commands that decide it).

An approval is named by its id or a unique prefix of one (`apr_3fa2`, `3fa2`); the
approvals API (`tether_client.approvals_api`) takes the operator token.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, ParamSpec

import httpx
import typer

from tether_client.approvals_api import ApprovalsClient, approvals, resolve_approval_id
from tether_client.complete import approval_ids
from tether_client.console import Format, OutputOption, emit, err, rows_table, say, to_data
from tether_client.endpoints import approvals_url
from tether_client.runref import RunRef, resolve_run_id
from tether_client.session import blocking, client_token, connect, operator_token, required_token
from tether_common.changetext import change_lines
from tether_common.errors import TetherError
from tether_common.excerpt import cut
from tether_common.messages.approvals import ApprovalView
from tether_common.messages.audit import AuditReport
from tether_common.messages.staging import ChangeSet

__all__ = [
    "ApprovalsClient",
    "approvals_app",
    "askable",
    "audit_app",
    "card",
    "client_token",
    "decide_elsewhere",
    "offer_approval",
    "say",
    "send_decision",
    "view_card",
    "wait_decided",
]

P = ParamSpec("P")

CARD_ARGS_CHARS = 2000
CARD_WIDTH = 100  # a card's prose is wrapped here (arguments and diffs are kept as they are)
CHOICES = {
    "o": "allow_once",
    "once": "allow_once",
    "r": "allow_run",
    "run": "allow_run",
    "c": "allow_chat",
    "chat": "allow_chat",
    "d": "deny",
    "deny": "deny",
}
PROMPT = "approve? [o]nce / [r]un / [c]hat / [d]eny / anything else leaves it: "
ApprovalStatus = Literal["pending", "granted", "denied", "expired", "consumed", "withdrawn"]
APPROVALS_LIST = "tether approvals list"

approvals_app = typer.Typer(
    help="Approval requests: list, show, approve, deny, edit, respond (operator token).",
    no_args_is_help=True,
    epilog="Example: tether approvals list; tether approvals approve apr_1234 --scope run",
)
audit_app = typer.Typer(help="Check audit trails.", no_args_is_help=True)

ApprovalId = Annotated[
    str,
    typer.Argument(
        help="An approval id or a unique prefix of one, e.g. apr_3fa2 or 3fa2 "
        "(see `tether approvals list`).",
        metavar="APPROVAL",
        show_default=False,
        autocompletion=approval_ids,
    ),
]
Note = Annotated[str | None, typer.Option(help="Why: kept with the decision.")]


def on_approvals(fn: Callable[P, Coroutine[Any, Any, int | None]]) -> Callable[P, None]:
    """`blocking`, for a command that takes an approval id: a missing one's hint names
    `tether approvals list`."""
    return blocking(fn, lists=APPROVALS_LIST)


@approvals_app.command("list")
@blocking
async def approvals_list(
    status: Annotated[ApprovalStatus, typer.Option(help="Requests in this state.")] = "pending",
    run: Annotated[
        str | None, typer.Option(help="Only this run's requests (an id, a prefix, or `last`).")
    ] = None,
    output: OutputOption = Format.table,
) -> int:
    """Approval requests, pending ones by default.

    Example: tether approvals list --status granted -o json
    """
    if run is not None:
        async with connect() as brain:
            run = await resolve_run_id(brain, run)
    async with approvals() as client:
        found = await client.list(status, run)
    rows = [
        (a.approval_id, a.status, progress(a), a.tool, a.run_id, a.step, a.reason[:60])
        for a in found
    ]
    table = rows_table(["APPROVAL", "STATUS", "VOTES", "TOOL", "RUN", "STEP", "REASON"], rows)
    emit(to_data(found), output, table if rows else f"no {status} approvals")
    return 0


@approvals_app.command("show")
@on_approvals
async def approvals_show(approval_id: ApprovalId, output: OutputOption = Format.table) -> int:
    """One request as a card: the tool and its arguments, why it asks, what approving
    changes (the diff), when it expires and who may decide; `-o json` has every field.

    Example: tether approvals show 3fa2; tether approvals show apr_1234 -o json
    """
    async with approvals() as client:
        view = await client.get(await resolve_approval_id(client, approval_id))
    # Said safe (`say`): the tool, arguments, paths and diffs are the call's own words.
    emit(view, output, "\n".join(view_card(view)))
    return 0


def view_card(view: ApprovalView, now: datetime | None = None) -> list[str]:
    """A request as an operator reads it: what, why, what it changes, until when, who."""
    arguments = json.dumps(cut(view.args), ensure_ascii=False, indent=2)
    lines = [
        f"── approval {view.approval_id}: {view.status}",
        f"   tool     {view.tool}",
        *_wrapped("   why      ", view.reason),
        f"   risk     danger {view.danger}, reach {view.reach}"
        + (f", scope {view.scope}" if view.scope else ""),
        f"   run      {view.run_id} step {view.step}"
        + (f" · agent {view.agent}" if view.agent else "")
        + (f" · asked by {view.requested_by}" if view.requested_by else ""),
        f"   expires  {_when(view.expires_at, now)}",
        *_deciders(view),
        "   arguments:",
        *(f"     {line}" for line in arguments.splitlines()),
    ]
    if view.changes is not None:
        lines += change_lines(view.changes)
    return lines


def _wrapped(head: str, text: str) -> list[str]:
    """`text` after `head`, wrapped at `CARD_WIDTH` under itself (a reason is a paragraph)."""
    return textwrap.wrap(
        text,
        CARD_WIDTH,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [head.rstrip()]


def _when(at: datetime, now: datetime | None = None) -> str:
    """`2025-05-01 12:03:00 UTC (in 2m 13s)`, or `… (3m 2s ago)`."""
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # the services' clock is UTC
    left = int((at - (now or datetime.now(UTC))).total_seconds())
    relative = f"in {_span(left)}" if left >= 0 else f"{_span(-left)} ago"
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({relative})"


def _span(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds}s" if minutes else f"{seconds}s"


def _deciders(view: ApprovalView) -> list[str]:
    """Who may decide (the roles that may, a quorum and its group, escalation), or who
    did."""
    if view.status != "pending":
        said = f"   decided  {view.decision or view.status}"
        said += f" by {view.decided_by}" if view.decided_by else ""
        said += f" at {view.decided_at:%Y-%m-%d %H:%M:%S} UTC" if view.decided_at else ""
        return [said + (f": {view.note}" if view.note else "")]
    roles = f"an admin, or an operator or approver of tenant {view.tenant}"
    if view.needed <= 1 and view.group is None:
        return [f"   decides  one person: {roles}"]
    people = f"{view.needed} different people" if view.needed > 1 else "one person"
    group = f" of group {view.group}" if view.group else ""
    requester = view.requested_by or view.owner
    lines = [
        f"   decides  {people}{group}"
        + (f", never the requester ({requester})" if requester else "")
        + "; any deny decides",
        f"            each: {roles}",
        f"            so far {progress(view)}: {_votes(view)}",
    ]
    if view.escalate_to and view.escalated_at is None and view.escalate_at:
        lines.append(
            f"            unanswered, it moves to group {view.escalate_to} "
            f"at {view.escalate_at:%Y-%m-%d %H:%M:%S} UTC"
        )
    return lines


def _votes(view: ApprovalView) -> str:
    return ", ".join(f"{v.by} ({v.decision})" for v in view.approvals) or "nobody yet"


def progress(view: ApprovalView) -> str:
    """A quorum's progress, `1/2 sre` (allows given of those needed, the group that may
    decide now); `-` for a request one decision decides."""
    if view.needed <= 1 and view.group is None:
        return "-"
    allowed = sum(1 for v in view.approvals if v.decision != "deny")
    return f"{allowed}/{view.needed}" + (f" {view.group}" if view.group else "")


async def decide(
    approval_id: str,
    decision: str,
    note: str | None,
    *,
    arguments: dict[str, Any] | None = None,
    text: str | None = None,
) -> int:
    async with approvals() as client:
        approval_id = await resolve_approval_id(client, approval_id)
        view = await client.decide(approval_id, decision, note, arguments=arguments, text=text)
    if view.decision is None:  # a vote towards a quorum
        who = ", ".join(v.by for v in view.approvals)
        say(f"{view.approval_id}: {view.status}, {progress(view)} approved (by {who})")
        return 0
    say(f"{view.approval_id}: {view.status} ({view.decision}) by {view.decided_by}")
    return 0


@approvals_app.command("approve")
@on_approvals
async def approvals_approve(
    approval_id: ApprovalId,
    scope: Annotated[
        Literal["once", "run", "chat"],
        typer.Option(
            help="once: this call; run: the same call for the rest of the run; chat: the thread.",
        ),
    ] = "once",
    note: Note = None,
) -> int:
    """Grant a request (exit 6 if it was already decided).

    Example: tether approvals approve apr_1234 --scope run --note "checked"
    """
    return await decide(approval_id, f"allow_{scope}", note)


@approvals_app.command("deny")
@on_approvals
async def approvals_deny(approval_id: ApprovalId, note: Note = None) -> int:
    """Deny a request; the run is told and goes on without the call.

    Example: tether approvals deny apr_1234 --note "not on prod"
    """
    return await decide(approval_id, "deny", note)


@approvals_app.command("edit")
@on_approvals
async def approvals_edit(
    approval_id: ApprovalId,
    args: Annotated[
        str,
        typer.Option(
            "--args",
            help="The call's new arguments, a JSON object (checked against the tool's schema).",
        ),
    ],
    note: Note = None,
) -> int:
    """Run the call with edited arguments instead: they are staged and gated again by the
    brain, and a call that would ask for more is put to you again as a new request.

    Example: tether approvals edit apr_1234 --args '{"command": "rm -rf build/tmp"}'
    """
    try:
        arguments = json.loads(args)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
    if not isinstance(arguments, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--args")
    return await decide(approval_id, "edit", note, arguments=arguments)


@approvals_app.command("respond")
@on_approvals
async def approvals_respond(
    approval_id: ApprovalId,
    text: Annotated[
        str,
        typer.Option("--text", help="What the model reads as the call's result, marked as yours."),
    ],
    note: Note = None,
) -> int:
    """Answer the model in the tool's place: nothing runs.

    Example: tether approvals respond apr_1234 --text "use the staging database instead"
    """
    return await decide(approval_id, "respond", note, text=text)


def report_lines(name: str, report: AuditReport) -> list[str]:
    if report.intact:
        return [f"{name} trail {report.trail}: intact (head {report.head})"]
    lines = [f"{name} trail {report.trail}: {len(report.problems)} problem(s)"]
    lines += [f"  {p.kind} at record {p.seq}: {p.detail}" for p in report.problems]
    return lines


@audit_app.command("verify")
@blocking
async def audit_verify(
    run: RunRef,
    output: OutputOption = Format.table,
) -> int:
    """Check both trails of a run, the brain's and the approvals service's; exit 1 if a
    record was changed, removed or reordered.

    Example: tether audit verify last
    """
    token = required_token()
    async with connect() as client:
        run_id = await resolve_run_id(client, run)
        brain = await client.verify_audit(run_id, token)
    async with ApprovalsClient(approvals_url(), token) as client:
        decisions = await client.audit(run_id)
    lines = report_lines("brain", brain) + report_lines("approvals", decisions)
    emit({"brain": brain, "approvals": decisions}, output, "\n".join(lines))
    return 0 if brain.intact and decisions.intact else 1


async def wait_decided(approval_id: str, token: str, poll_s: float = 0.5) -> ApprovalView:
    """Until an operator (or expiry) decides the request; polled, as a one-off command
    needs no event stream of its own."""
    async with ApprovalsClient(approvals_url(), token) as client:
        while (view := await client.get(approval_id)).status == "pending":  # noqa: ASYNC110
            await asyncio.sleep(poll_s)
    return view


def card(data: Mapping[str, Any]) -> str:
    """The approval card: tool, arguments, why it asks, reach, danger, expiry."""
    arguments = json.dumps(data.get("arguments", {}), ensure_ascii=False, indent=2)
    if len(arguments) > CARD_ARGS_CHARS:
        arguments = arguments[:CARD_ARGS_CHARS] + " …"
    return "\n".join(
        [
            f"── approval needed: {data.get('name')} (approval {data.get('approval_id')})",
            f"   why: {data.get('code')}: {data.get('reason')}",
            f"   reach {data.get('reach')}, danger {data.get('danger')}, "
            f"expires {data.get('expires_at')}",
            "   arguments:",
            *(f"     {line}" for line in arguments.splitlines()),
        ]
    )


def askable() -> bool:
    """Whether a request can be asked here: stdin is a terminal (a person) and an
    operator token is configured."""
    return operator_token() is not None and sys.stdin.isatty()


def decide_elsewhere(data: Mapping[str, Any], run_id: str) -> None:
    """For a `tool.approval_needed` event nobody here can answer (a pipe, no operator
    token): the exact commands that decide it, on stderr."""
    approval_id = data.get("approval_id")
    if not approval_id:  # an event from before requests had ids on it
        err(f"an approval is needed: see `tether approvals list --run {run_id}`", "bold yellow")
        return
    err(f"approval {approval_id} is needed{_expiry(data)}. Approve it with:")
    err(f"  tether approvals approve {approval_id}", "bold yellow")
    err(f"see it: tether approvals show {approval_id}; deny: tether approvals deny {approval_id}")


def _expiry(data: Mapping[str, Any]) -> str:
    """`; it expires …` for an event that says when (else nothing)."""
    if not (said := data.get("expires_at")):
        return ""
    try:
        return f"; it expires {_when(datetime.fromisoformat(str(said)))}"
    except ValueError:  # of another form: said as it is
        return f"; it expires {said}"


async def offer_approval(
    data: Mapping[str, Any], *, read: Callable[[str], str] = input
) -> str | None:
    """`tether run`'s hook for a `tool.approval_needed` event: when stdin is a terminal and
    an operator token is configured (`askable`), show the card and send the operator's
    decision. Returns the decision sent, or None (not offered, left for another operator,
    refused)."""
    token = operator_token()
    if token is None or not askable():
        return None
    say(card(data))
    staged = await _staged_changes(str(data.get("approval_id")), token)
    if staged is not None:
        say("\n".join(change_lines(staged)))
    answer = await asyncio.to_thread(read, PROMPT)
    return await send_decision(data, answer, token, "decided in tether run")


async def _staged_changes(approval_id: str, token: str) -> ChangeSet | None:
    """The card's change set, when the call was staged (the run event carries none)."""
    try:
        async with ApprovalsClient(approvals_url(), token) as client:
            return (await client.get(approval_id)).changes
    except (TetherError, httpx.TransportError):
        return None  # the card above still says what the call is


async def send_decision(data: Mapping[str, Any], answer: str, token: str, note: str) -> str | None:
    """The operator's answer to a card (`PROMPT`'s choices) sent as the decision. Returns
    the decision sent, or None (any other answer leaves it, or the service refused)."""
    decision = CHOICES.get(answer.strip().lower())
    if decision is None:
        say("left for another operator")
        return None
    try:
        async with ApprovalsClient(approvals_url(), token) as client:
            view = await client.decide(str(data["approval_id"]), decision, note)
    except (TetherError, httpx.TransportError) as exc:
        say(f"not decided: {exc}")
        return None
    say(f"{view.approval_id}: {view.decision}")
    return decision
