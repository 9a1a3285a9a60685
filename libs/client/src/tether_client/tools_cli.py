"""`tether tools list|run`, `tether policy explain` and `tether outputs download`: the tool
catalogue, an operator's manual tool run through the gates, what the gates would decide,
and a stored large result checked against its digest."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import httpx
import typer

from tether_client.client import raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, say, to_data
from tether_client.endpoints import outputs_url
from tether_client.exits import ExitCode
from tether_client.ops_cli import wait_decided
from tether_client.session import blocking, connect, required_token
from tether_common.errors import ConflictError, MessageError
from tether_common.messages.policy import ToolRunAsked
from tether_common.messages.runs import PermissionMode

__all__ = ["call_arguments", "outputs_app", "policy_app", "tools_app"]

tools_app = typer.Typer(
    help="The tool catalogue, and running one tool by hand.", no_args_is_help=True
)
policy_app = typer.Typer(help="What the gates decide, and why.", no_args_is_help=True)
outputs_app = typer.Typer(help="Stored large results (operator token).", no_args_is_help=True)

Tool = Annotated[
    str, typer.Argument(help="The tool's name (see `tether tools list`).", show_default=False)
]
ArgsJson = Annotated[
    str,
    typer.Argument(
        help="The call's arguments as a JSON object.", metavar="ARGS_JSON", show_default=False
    ),
]
Agent = Annotated[str | None, typer.Option(help="Whose grants apply (default: the default agent).")]


def call_arguments(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageError(f"ARGS_JSON is not JSON: {exc}", code="invalid_request") from None
    if not isinstance(found, dict):
        raise MessageError("ARGS_JSON must be a JSON object", code="invalid_request")
    return found


@tools_app.command("list")
@blocking
async def tools_list(output: OutputOption = Format.table) -> int:
    """Every tool with its scope, reach and description.

    Example: tether tools list -o yaml
    """
    async with connect() as client:
        found = await client.tools()
    rows = [(t.name, t.scope, t.reach, t.description.splitlines()[0][:70]) for t in found]
    emit(to_data(found), output, rows_table(["TOOL", "SCOPE", "REACH", "DESCRIPTION"], rows))
    return 0


@tools_app.command("run")
@blocking
async def tools_run(
    tool: Tool,
    args_json: ArgsJson,
    agent: Agent = None,
    approval_id: Annotated[
        str | None, typer.Option(help="Spend this granted approval on the call.")
    ] = None,
    wait: Annotated[bool, typer.Option(help="When the gates ask, wait for the decision.")] = False,
) -> int:
    """Run one tool through the same gates as a model's call (operator token). Exit 0: it
    ran and succeeded; 1: it failed or was not approved; 7: it waits for an approval.

    Example: tether tools run calculate '{"expression": "6*7"}'
    """
    call_args = call_arguments(args_json)  # a usage error before a missing token
    token = required_token()
    async with connect() as client:
        found = await client.run_tool(tool, call_args, token, agent=agent, approval_id=approval_id)
        if isinstance(found, ToolRunAsked):
            asked = found.approval_id
            say(f"approval needed: {asked} ({found.error.code}: {found.error.message})")
            if not wait:
                say(
                    f"decide it (tether approvals approve {asked}), then run again with --approval-id {asked}"
                )
                return ExitCode.WAITING
            view = await wait_decided(asked, token)
            if view.status != "granted":
                say(f"{asked}: {view.status} ({view.decision}); nothing ran")
                return ExitCode.FAILED
            found = await client.run_tool(tool, call_args, token, agent=agent, approval_id=asked)
            if isinstance(found, ToolRunAsked):  # granted, yet the gates ask again
                say(f"approval needed again: {found.approval_id}; nothing ran")
                return ExitCode.FAILED
    outcome = "ok" if found.ok else f"failed ({found.error_code})"
    say(f"{found.name}: {outcome} in {found.duration_ms:.0f} ms")
    say(found.content)
    return ExitCode.OK if found.ok else ExitCode.FAILED


@policy_app.command("explain")
@blocking
async def policy_explain(
    tool: Tool,
    args_json: ArgsJson,
    agent: Agent = None,
    mode: Annotated[
        PermissionMode | None,
        typer.Option(
            help="As in this mode.",
        ),
    ] = None,
    tainted: Annotated[bool, typer.Option(help="As if untrusted text was read.")] = False,
    output: OutputOption = Format.table,
) -> int:
    """Explain the gates' verdict on a call; nothing runs.

    Example: tether policy explain file_write '{"path": "a.txt", "content": "x"}' --agent writer
    """
    call_args = call_arguments(args_json)
    async with connect() as client:
        found = await client.explain(tool, call_args, agent=agent, mode=mode, tainted=tainted)
    code = f" ({found.code})" if found.code else ""
    lines = [
        f"{found.tool} for agent {found.agent}: {found.decision}{code}",
        f"  {found.reason}",
    ]
    lines += [f"  - {line}" for line in found.trail]
    emit(found, output, "\n".join(lines))
    return 0


@outputs_app.command("download")
@blocking
async def outputs_download(
    ref: Annotated[
        str, typer.Argument(help="The output's ref (from a digest).", show_default=False)
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of standard output.")
    ] = None,
) -> int:
    """A whole stored output, streamed and checked against the sha256 the store announces
    (a mismatch is exit 6).

    Example: tether outputs download out_1234 -o build.log
    """
    headers = {"Authorization": f"Bearer {required_token()}"}
    digest = hashlib.sha256()
    async with (
        httpx.AsyncClient(base_url=outputs_url(), timeout=60) as client,
        client.stream("GET", f"/v1/outputs/{ref}", headers=headers) as response,
    ):
        if response.is_error:
            await response.aread()
            raise_for_error(response)
        sink: BinaryIO = await asyncio.to_thread(output.open, "wb") if output else sys.stdout.buffer
        try:
            async for piece in response.aiter_bytes():
                digest.update(piece)
                sink.write(piece)
        finally:
            if output:
                sink.close()
            else:
                sink.flush()
        expected = response.headers.get("x-content-sha256")
    if expected is not None and digest.hexdigest() != expected:
        raise ConflictError(
            f"{ref} arrived with sha256 {digest.hexdigest()}, not {expected}",
            code="checksum_mismatch",
        )
    return 0
