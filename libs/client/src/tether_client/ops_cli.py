"""Operator commands of `tether`: `approvals list|show|approve|deny`, `audit verify RUN`,
and the approval card `tether run` offers inline on a terminal.

The approvals API is at `TETHER_APPROVALS_URL` (else where `tether up` put it, else
http://127.0.0.1:8701); it takes the operator token.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Annotated, Any, Literal

import httpx
import typer

from tether_client.client import raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, say, to_data
from tether_client.endpoints import approvals_url
from tether_client.runref import RunRef, resolve_run_id
from tether_client.session import blocking, client_token, connect, operator_token, required_token
from tether_common.errors import TetherError
from tether_common.messages.approvals import ApprovalList, ApprovalView
from tether_common.messages.audit import AuditReport
from tether_common.messages.staging import ChangeEntry, ChangeSet

__all__ = [
    "ApprovalsClient",
    "approvals_app",
    "audit_app",
    "card",
    "client_token",
    "offer_approval",
    "say",
    "send_decision",
    "wait_decided",
]

CARD_ARGS_CHARS = 2000
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

approvals_app = typer.Typer(
    help="Approval requests: list, show, approve, deny (operator token).",
    no_args_is_help=True,
    epilog="Example: tether approvals list; tether approvals approve apr_1234 --scope run",
)
audit_app = typer.Typer(help="Check audit trails.", no_args_is_help=True)

ApprovalId = Annotated[
    str, typer.Argument(help="The approval's id (see `tether approvals list`).", show_default=False)
]
Note = Annotated[str | None, typer.Option(help="Why: kept with the decision.")]


class ApprovalsClient:
    """The approvals service's operator API (bearer token on every call)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> ApprovalsClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        raise_for_error(response)
        return response.json()

    async def list(self, status: str = "pending", run_id: str | None = None) -> list[ApprovalView]:
        params = {"status": status} | ({"run_id": run_id} if run_id else {})
        found = await self._call("GET", "/v1/approvals", params=params)
        return ApprovalList.model_validate(found).approvals

    async def get(self, approval_id: str) -> ApprovalView:
        return ApprovalView.model_validate(await self._call("GET", f"/v1/approvals/{approval_id}"))

    async def decide(self, approval_id: str, decision: str, note: str | None) -> ApprovalView:
        body = {"decision": decision} | ({"note": note} if note else {})
        found = await self._call("POST", f"/v1/approvals/{approval_id}/decision", json=body)
        return ApprovalView.model_validate(found)

    async def audit(self, run_id: str) -> AuditReport:
        return AuditReport.model_validate(await self._call("GET", f"/v1/audit/{run_id}"))


def approvals() -> ApprovalsClient:
    return ApprovalsClient(approvals_url(), required_token())


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
@blocking
async def approvals_show(approval_id: ApprovalId, output: OutputOption = Format.table) -> int:
    """One request: the exact action, why it asks, its state.

    Example: tether approvals show apr_1234 -o json
    """
    async with approvals() as client:
        view = await client.get(approval_id)
    if output is Format.table and view.changes is not None:
        emit(view, output)
        say("\n".join(change_lines(view.changes)))  # said safe: paths and diffs are the call's
        return 0
    emit(view, output)
    return 0


def change_lines(changes: ChangeSet) -> list[str]:
    """A staged effect as an operator reads it: what approving applies, exactly."""
    lines = [
        f"── approving applies exactly these changes ({len(changes.entries)}; "
        f"digest {changes.digest[:12]})"
    ]
    for entry in changes.entries:
        lines.append(f"   {entry.change} {entry.path}{_entry_note(entry)}")
        lines += [f"     {line}" for line in (entry.diff or "").splitlines()]
    if changes.output:
        lines += [
            "   the staged command said:",
            *(f"     {x}" for x in changes.output.splitlines()),
        ]
    return lines


def _entry_note(entry: ChangeEntry) -> str:
    if entry.type == "dir":
        return " (folder)"
    if entry.type == "binary":
        before = "-" if entry.size_before is None else entry.size_before
        after = "-" if entry.size_after is None else entry.size_after
        return f" (binary, {before} → {after} bytes, sha256 {entry.digest or '-'})"
    return ""


def progress(view: ApprovalView) -> str:
    """A quorum's progress, `1/2 sre` (allows given of those needed, the group that may
    decide now); `-` for a request one decision decides."""
    if view.needed <= 1 and view.group is None:
        return "-"
    allowed = sum(1 for v in view.approvals if v.decision != "deny")
    return f"{allowed}/{view.needed}" + (f" {view.group}" if view.group else "")


async def decide(approval_id: str, decision: str, note: str | None) -> int:
    async with approvals() as client:
        view = await client.decide(approval_id, decision, note)
    if view.decision is None:  # a vote towards a quorum
        who = ", ".join(v.by for v in view.approvals)
        say(f"{view.approval_id}: {view.status}, {progress(view)} approved (by {who})")
        return 0
    say(f"{view.approval_id}: {view.status} ({view.decision}) by {view.decided_by}")
    return 0


@approvals_app.command("approve")
@blocking
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
@blocking
async def approvals_deny(approval_id: ApprovalId, note: Note = None) -> int:
    """Deny a request; the run is told and goes on without the call.

    Example: tether approvals deny apr_1234 --note "not on prod"
    """
    return await decide(approval_id, "deny", note)


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


async def offer_approval(
    data: Mapping[str, Any], *, read: Callable[[str], str] = input
) -> str | None:
    """`tether run`'s hook for a `tool.approval_needed` event: when stdin is a terminal and
    an operator token is configured, show the card and send the operator's decision.
    Returns the decision sent, or None (not offered, left for another operator, refused)."""
    token = operator_token()
    if token is None or not sys.stdin.isatty():
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
