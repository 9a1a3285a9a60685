"""Operator commands of `tether`: `approvals list|show|approve|deny`, `audit verify RUN`,
`policy explain TOOL ARGS_JSON`, and the approval card `tether run` offers inline.

The approvals API is at `TETHER_APPROVALS_URL` (default http://127.0.0.1:8701); the
operator token comes from `TETHER_OPERATOR_TOKEN` or `~/.tether/operator-token`; calls to
the brain carry `TETHER_TOKEN` when set, else the operator token.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import httpx

from tether_client.client import TetherClient, raise_for_error
from tether_common.errors import AuthError, ConflictError, MessageError, TetherError
from tether_common.messages.approvals import ApprovalList, ApprovalView
from tether_common.settings import tether_home

DEFAULT_APPROVALS_URL = "http://127.0.0.1:8701"
DEFAULT_OUTPUTS_URL = "http://127.0.0.1:8702"
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

ApiUrl = Callable[[], str]


def say(line: str) -> None:
    """One line to stdout, flushed (the inline card interleaves with run events)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def approvals_url() -> str:
    return os.environ.get("TETHER_APPROVALS_URL", DEFAULT_APPROVALS_URL)


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
            f"no operator token: set TETHER_OPERATOR_TOKEN or write {tether_home() / 'operator-token'}",
            code="no_token",
        )
    return token


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

    async def audit(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call("GET", f"/v1/audit/{run_id}")
        return found


def approvals() -> ApprovalsClient:
    return ApprovalsClient(approvals_url(), required_token())


async def approvals_list(args: argparse.Namespace) -> int:
    async with approvals() as client:
        found = await client.list(args.status, args.run)
    for item in found:
        say(
            f"{item.approval_id}  {item.status:8} {item.tool:16} run={item.run_id} "
            f"step={item.step} {item.reason[:60]}"
        )
    if not found:
        say(f"no {args.status} approvals")
    return 0


async def approvals_show(args: argparse.Namespace) -> int:
    async with approvals() as client:
        say((await client.get(args.approval_id)).model_dump_json(indent=2))
    return 0


async def approvals_decide(args: argparse.Namespace) -> int:
    decision = "deny" if args.action == "deny" else f"allow_{args.scope}"
    async with approvals() as client:
        view = await client.decide(args.approval_id, decision, args.note)
    say(f"{view.approval_id}: {view.status} ({view.decision}) by {view.decided_by}")
    return 0


def print_report(name: str, report: Mapping[str, Any]) -> None:
    if report["intact"]:
        say(f"{name} trail {report['trail']}: intact (head {report['head']})")
        return
    say(f"{name} trail {report['trail']}: {len(report['problems'])} problem(s)")
    for problem in report["problems"]:
        say(f"  {problem['kind']} at record {problem['seq']}: {problem['detail']}")


async def audit_verify(args: argparse.Namespace, api_url: str) -> int:
    """Both trails of a run: the brain's (decisions, calls) and the approvals service's."""
    token = required_token()
    async with TetherClient(api_url, token=client_token()) as client:
        brain = await client.verify_audit(args.run_id, token)
    async with ApprovalsClient(approvals_url(), token) as client:
        decisions = await client.audit(args.run_id)
    print_report("brain", brain)
    print_report("approvals", decisions)
    return 0 if brain["intact"] and decisions["intact"] else 1


def call_arguments(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageError(f"ARGS is not JSON: {exc}", code="invalid_request") from None
    if not isinstance(found, dict):
        raise MessageError("ARGS must be a JSON object", code="invalid_request")
    return found


async def policy_explain(args: argparse.Namespace, api_url: str) -> int:
    call_args = call_arguments(args.args_json)
    async with TetherClient(api_url, token=client_token()) as client:
        found = await client.explain(
            args.tool, call_args, agent=args.agent, mode=args.mode, tainted=args.tainted
        )
    code = f" ({found['code']})" if found.get("code") else ""
    say(f"{found['tool']} for agent {found['agent']}: {found['decision']}{code}")
    say(f"  {found['reason']}")
    for line in found.get("trail", []):
        say(f"  - {line}")
    return 0


async def wait_decided(approval_id: str, token: str, poll_s: float = 0.5) -> ApprovalView:
    """Until an operator (or expiry) decides the request; polled, as a one-off command
    needs no event stream of its own."""
    async with ApprovalsClient(approvals_url(), token) as client:
        while (view := await client.get(approval_id)).status == "pending":  # noqa: ASYNC110
            await asyncio.sleep(poll_s)
    return view


async def tools_run(args: argparse.Namespace, api_url: str) -> int:
    """Exit 0: the tool ran and succeeded; 1: it ran and failed, or was not approved;
    3: it waits for an approval (without --wait)."""
    token = required_token()
    call_args = call_arguments(args.args_json)
    async with TetherClient(api_url, token=client_token()) as client:
        found = await client.run_tool(
            args.tool, call_args, token, agent=args.agent, approval_id=args.approval_id
        )
        if found.get("decision") == "ask":
            approval_id = str(found["approval_id"])
            error = found.get("error") or {}
            say(f"approval needed: {approval_id} ({error.get('code')}: {error.get('message')})")
            if not args.wait:
                say(
                    f"decide it (tether approvals approve {approval_id}), then run again "
                    f"with --approval-id {approval_id}"
                )
                return 3
            view = await wait_decided(approval_id, token)
            if view.status != "granted":
                say(f"{approval_id}: {view.status} ({view.decision}); nothing ran")
                return 1
            found = await client.run_tool(
                args.tool, call_args, token, agent=args.agent, approval_id=approval_id
            )
    outcome = "ok" if found["ok"] else f"failed ({found.get('error_code')})"
    say(f"{found['name']}: {outcome} in {found.get('duration_ms', 0):.0f} ms")
    say(str(found["content"]))
    return 0 if found["ok"] else 1


def outputs_url() -> str:
    return os.environ.get("TETHER_OUTPUTS_URL", DEFAULT_OUTPUTS_URL)


async def outputs_download(args: argparse.Namespace) -> int:
    """A whole stored output, streamed to a file (or stdout) and checked against the
    sha256 the store announces (a mismatch is an error, exit 2)."""
    headers = {"Authorization": f"Bearer {required_token()}"}
    digest = hashlib.sha256()
    async with (
        httpx.AsyncClient(base_url=outputs_url(), timeout=60) as client,
        client.stream("GET", f"/v1/outputs/{args.ref}", headers=headers) as response,
    ):
        if response.is_error:
            await response.aread()
            raise_for_error(response)
        sink: BinaryIO = (
            await asyncio.to_thread(Path(args.output).open, "wb")
            if args.output
            else sys.stdout.buffer
        )
        try:
            async for piece in response.aiter_bytes():
                digest.update(piece)
                sink.write(piece)
        finally:
            if args.output:
                sink.close()
            else:
                sink.flush()
        expected = response.headers.get("x-content-sha256")
    if expected is not None and digest.hexdigest() != expected:
        raise ConflictError(
            f"{args.ref} arrived with sha256 {digest.hexdigest()}, not {expected}",
            code="checksum_mismatch",
        )
    return 0


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
    answer = (await asyncio.to_thread(read, PROMPT)).strip().lower()
    decision = CHOICES.get(answer)
    if decision is None:
        say("left for another operator")
        return None
    try:
        async with ApprovalsClient(approvals_url(), token) as client:
            view = await client.decide(str(data["approval_id"]), decision, "decided in tether run")
    except TetherError as exc:
        say(f"not decided: {exc.code}: {exc.message}")
        return None
    say(f"{view.approval_id}: {view.decision}")
    return decision


def _add_approvals(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("approvals", help="pending approvals: list, show, decide")
    actions = group.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list")
    listing.add_argument("--status", default="pending")
    listing.add_argument("--run", help="only this run's requests")
    listing.set_defaults(fn=approvals_list)
    show = actions.add_parser("show")
    show.add_argument("approval_id")
    show.set_defaults(fn=approvals_show)
    approve = actions.add_parser("approve")
    approve.add_argument("approval_id")
    approve.add_argument("--scope", choices=["once", "run", "chat"], default="once")
    approve.add_argument("--note")
    approve.set_defaults(fn=approvals_decide)
    deny = actions.add_parser("deny")
    deny.add_argument("approval_id")
    deny.add_argument("--note")
    deny.set_defaults(fn=approvals_decide)


def add_tools_run(
    tools: argparse._SubParsersAction[argparse.ArgumentParser], api_url: ApiUrl
) -> None:
    """Register `tether tools run` (an operator's manual tool run through the gates)."""

    async def run(args: argparse.Namespace) -> int:
        return await tools_run(args, api_url())

    parser = tools.add_parser("run", help="run one tool through the gates (operator token)")
    parser.add_argument("tool")
    parser.add_argument("args_json", metavar="ARGS_JSON")
    parser.add_argument("--agent", help="whose grants apply (default: the default agent)")
    parser.add_argument("--approval-id", help="spend this granted approval on the call")
    parser.add_argument(
        "--wait", action="store_true", help="when the gates ask, wait for the decision"
    )
    parser.set_defaults(fn=run)


def _add_outputs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    outputs = sub.add_parser("outputs", help="stored large results (operator token)")
    actions = outputs.add_subparsers(dest="action", required=True)
    download = actions.add_parser("download", help="a whole output, checked against its sha256")
    download.add_argument("ref")
    download.add_argument("--output", "-o", help="write here instead of standard output")
    download.set_defaults(fn=outputs_download)


def add_subcommands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], api_url: ApiUrl
) -> None:
    """Register `approvals`, `outputs`, `audit` and `policy` on the `tether` parser."""
    _add_approvals(sub)
    _add_outputs(sub)

    async def run_verify(args: argparse.Namespace) -> int:
        return await audit_verify(args, api_url())

    async def run_explain(args: argparse.Namespace) -> int:
        return await policy_explain(args, api_url())

    audit = sub.add_parser("audit", help="check audit trails").add_subparsers(
        dest="action", required=True
    )
    verify = audit.add_parser("verify", help="exit 1 if a run's trail was tampered with")
    verify.add_argument("run_id")
    verify.set_defaults(fn=run_verify)
    policy = sub.add_parser("policy", help="what the gates decide").add_subparsers(
        dest="action", required=True
    )
    explain = policy.add_parser("explain", help="explain a call's verdict; runs nothing")
    explain.add_argument("tool")
    explain.add_argument("args_json", metavar="ARGS_JSON")
    explain.add_argument("--agent")
    explain.add_argument("--mode", choices=["read-only", "allow-reads", "allow-all"])
    explain.add_argument("--tainted", action="store_true", help="as if untrusted text was read")
    explain.set_defaults(fn=run_explain)
