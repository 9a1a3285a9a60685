"""`tether run` and `tether runs list|show|follow|stop|message`: start runs and watch them.

Wherever a run id is taken, a unique prefix of one (with or without `run_`) or `last`
(your newest run) does too; they are resolved against the runs your token may list.
A followed event stream that drops (a brain restart, a network cut) is resumed from the
last event seen (`Last-Event-ID`), so nothing is shown twice or lost; Ctrl-C stops
following, never the run. A call that waits for an operator is asked inline on a
terminal with an operator token; elsewhere (a pipe, a script) `tether run` prints the
commands that decide it and exits 7 (`--wait-approval`: waits), while `runs follow`
always waits.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError

from tether_client.client import TetherClient
from tether_client.console import Format, OutputOption, emit, err, rows_table, say, to_data
from tether_client.exits import ExitCode
from tether_client.interrupts import interruptible
from tether_client.render import render, style, typed_or_none
from tether_client.runref import RunRef, resolve_run_id, short
from tether_client.session import blocking, connect
from tether_common.errors import MessageError, TetherError
from tether_common.messages.events import RunEndEvent, ToolApprovalNeededEvent
from tether_common.messages.runs import TERMINAL_STATUSES, PermissionMode, RunEvent, RunStatus

__all__ = ["app", "follow", "run_command", "status_now"]

app = typer.Typer(
    help="Inspect, follow, stop and message runs.",
    no_args_is_help=True,
    epilog="Example: tether runs list --status awaiting_approval",
)

RECONNECT_FOR_S = 120.0  # how long a dropped stream is retried before giving up

Status = Annotated[
    RunStatus | None,
    typer.Option(help="Only runs in this status."),
]


def show_event(event: RunEvent, fmt: Format) -> None:
    if fmt is not Format.table:
        emit(event.model_dump(mode="json"), fmt)
        if fmt is Format.yaml:
            sys.stdout.write("---\n")
        return
    if (line := render(event)) is not None:
        head, _, rest = line.partition("\n")  # the style marks the event, not the answer
        say(head, style(event))
        if rest:
            say(rest)


async def status_now(client: TetherClient, run_id: str) -> str | None:
    """The run's status now (None: the brain cannot say, e.g. it is restarting)."""
    try:
        return (await client.get_run(run_id)).status
    except (httpx.TransportError, TetherError) as exc:
        if isinstance(exc, TetherError) and not exc.retryable:
            raise
        return None


async def follow(
    client: TetherClient,
    run_id: str,
    after: int = 0,
    fmt: Format = Format.table,
    *,
    wait_approval: bool = True,
) -> int:
    """Show the run's events after `after` to its end, resuming a dropped stream from the
    last event seen. A call that waits for an operator is asked here when it can be
    (`askable`, table output); else its commands are said and, unless `wait_approval`,
    the follow ends with 7. 0 when the run completed, else 1."""
    last, dropped_at = after, None
    try:
        while True:
            try:
                async for event in client.events(run_id, after=last):
                    last, dropped_at = event.seq, None
                    show_event(event, fmt)
                    read = typed_or_none(event)
                    if (
                        isinstance(read, ToolApprovalNeededEvent)
                        and not await approval_here(read, fmt)
                        and not wait_approval
                    ):
                        return parked(run_id)
                    if isinstance(read, RunEndEvent):
                        return 0 if read.data.status == "completed" else 1
                    if event.kind == "run.end":  # an end whose data is unreadable
                        return 1
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}"
            else:
                reason = "the stream closed"
            status = await status_now(client, run_id)
            if status in TERMINAL_STATUSES:  # its end was at or before `after`
                return 0 if status == "completed" else 1
            dropped_at = dropped_at or time.monotonic()
            if time.monotonic() - dropped_at > RECONNECT_FOR_S:
                raise httpx.ConnectError(f"the event stream of {run_id} stayed down")
            err(f"… event stream lost ({reason}); resuming after event {last}", "yellow")
            await asyncio.sleep(1.0)
    except asyncio.CancelledError:
        err(
            f"Stopped following. Run {short(run_id)} goes on; follow it again with: "
            f"tether runs follow {short(run_id)}",
            "bold",
        )
        raise


async def approval_here(event: ToolApprovalNeededEvent, fmt: Format) -> bool:
    """Offer the card when someone here can answer it (True: offered); else say the
    commands that decide it."""
    # Here, not at the top: the approvals' models and client load only for a run that asks.
    from tether_client.ops_cli import askable, decide_elsewhere, offer_approval

    data = event.data.model_dump(mode="json")
    if fmt is Format.table and askable():
        await offer_approval(data)
        return True
    decide_elsewhere(data, event.run_id)
    return False


def parked(run_id: str) -> int:
    err(
        f"run {short(run_id)} waits for that decision; follow it again with: "
        f"tether runs follow {short(run_id)}"
    )
    return ExitCode.WAITING


def read_prompt(prompt: str) -> str:
    return sys.stdin.read() if prompt == "-" else prompt


@blocking
async def run_command(
    prompt: Annotated[
        str,
        typer.Argument(help="What to do; `-` reads it from standard input.", show_default=False),
    ],
    agent: Annotated[
        str | None, typer.Option(help="The agent whose grants and budgets apply.")
    ] = None,
    provider: Annotated[
        str | None, typer.Option(help="Model provider (e.g. rules, local).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name at that provider.")] = None,
    mode: Annotated[
        PermissionMode | None,
        typer.Option(help="Permission mode."),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step budget (ceiling 20).")] = None,
    max_tool_calls: Annotated[int | None, typer.Option(help="Tool-call budget.")] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="Cost budget (provider's currency).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Token budget (needs usage reports).")
    ] = None,
    max_seconds: Annotated[
        float | None, typer.Option(help="Time budget; parked time is free.")
    ] = None,
    allow_shell: Annotated[
        bool | None, typer.Option("--allow-shell/--no-shell", help="Offer the shell tool.")
    ] = None,
    allow_web: Annotated[
        bool | None, typer.Option("--allow-web/--no-web", help="Offer the web tools.")
    ] = None,
    guide_only: Annotated[bool, typer.Option(help="Answer with guidance, run no tools.")] = False,
    research: Annotated[bool, typer.Option(help="Research mode: look things up first.")] = False,
    interactive: Annotated[
        bool, typer.Option(help="An operator is here: asks wait for one (else refused).")
    ] = False,
    wait_approval: Annotated[
        bool,
        typer.Option(
            help="At a call that needs an approval nobody here can give (a pipe, no "
            "operator token), wait for the decision; default: print the commands that "
            "decide it and exit 7.",
        ),
    ] = False,
    follow_run: Annotated[
        bool,
        typer.Option(
            "--follow/--detach", "-f/-d", help="Stream its events, or print its id and return."
        ),
    ] = True,
    output: OutputOption = Format.table,
) -> int:
    """Start a run and stream its events to the end (exit 0 when it completed; 7 when it
    waits for an approval nobody here can give, after printing how to give it).

    Example: tether run "what time is it in Tokyo?" --max-steps 4
    """
    options: dict[str, Any] = {
        "agent": agent,
        "provider": provider,
        "model": model,
        "mode": mode,
        "max_steps": max_steps,
        "max_tool_calls": max_tool_calls,
        "max_cost": max_cost,
        "max_tokens": max_tokens,
        "max_seconds": max_seconds,
        "allow_shell": allow_shell,
        "allow_web": allow_web,
        "guide_only": guide_only,
        "research": research,
        "interactive": interactive,
    }
    text = read_prompt(prompt)
    async with connect() as client:
        try:
            accepted = await client.start_run(text, **options)
        except ValidationError as exc:  # the options' check, before anything is sent
            problems = "; ".join(
                f"--{'.'.join(map(str, e['loc'])).replace('_', '-')}: {e['msg']}"
                for e in exc.errors()
            )
            raise MessageError(problems, code="invalid_request") from None
        if not follow_run:
            emit(to_data(accepted), output, accepted.run_id)
            err(f"follow it with: tether runs follow {short(accepted.run_id)}", "dim")
            return 0
        followed = follow(client, accepted.run_id, fmt=output, wait_approval=wait_approval)
        return await interruptible(followed)


@app.command("list")
@blocking
async def runs_list(
    status: Status = None,
    parent: Annotated[str | None, typer.Option(help="Only the sub-agents of this run.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 20,
    output: OutputOption = Format.table,
) -> int:
    """Your runs, newest first.

    Example: tether runs list --status completed --limit 5 -o json
    """
    async with connect() as client:
        parent_id = await resolve_run_id(client, parent) if parent else None
        found = await client.list_runs(status=status, parent_id=parent_id, limit=limit)
    rows = [
        (
            r.run_id,
            r.status,
            r.step,
            f"{r.created_at:%Y-%m-%d %H:%M:%S}",
            " ".join(r.prompt.split())[:60],
        )
        for r in found.runs
    ]
    table = rows_table(["RUN", "STATUS", "STEP", "CREATED", "PROMPT"], rows)
    empty = "no runs" + (f" with status {status}" if status else "")
    emit(to_data(found.runs), output, table if rows else empty)
    return 0


@app.command("show")
@blocking
async def runs_show(run: RunRef, output: OutputOption = Format.table) -> int:
    """A run's status, answer, usage and steps.

    Example: tether runs show last -o yaml
    """
    async with connect() as client:
        view = await client.get_run(await resolve_run_id(client, run))
    if output is not Format.table:
        emit(view, output)
        return 0
    head = view.model_dump(mode="json", exclude={"version", "steps", "prompt", "answer"})
    emit(head, output)
    steps = [
        (s.step, s.kind, s.tool or "", s.outcome or "", " ".join(s.text.split())[:80])
        for s in view.steps
    ]
    if steps:
        say("")
        emit(None, output, rows_table(["STEP", "KIND", "TOOL", "OUTCOME", "TEXT"], steps))
    say("")
    say(f"prompt: {view.prompt}")
    if view.answer:
        say(f"answer: {view.answer}")
    return 0


@app.command("follow")
@blocking
async def runs_follow(
    run: RunRef,
    after: Annotated[int, typer.Option(min=0, help="Skip events up to this sequence number.")] = 0,
    output: OutputOption = Format.table,
) -> int:
    """Stream a run's events to its end (exit 0 when it completed); resumes after a drop.

    Example: tether runs follow last
    """
    async with connect() as client:
        run_id = await resolve_run_id(client, run)
        return await interruptible(follow(client, run_id, after, output))


@app.command("stop")
@blocking
async def runs_stop(run: RunRef) -> int:
    """Ask a run (and its sub-agents) to stop.

    Example: tether runs stop run_3fa2
    """
    async with connect() as client:
        accepted = await client.stop_run(await resolve_run_id(client, run))
    say(f"{accepted.run_id}: {accepted.status}")
    return 0


@app.command("message")
@blocking
async def runs_message(
    run: RunRef,
    text: Annotated[
        str, typer.Argument(help="What to tell it; `-` reads standard input.", show_default=False)
    ],
) -> int:
    """Queue a message for a run: it is read after the current step.

    Example: tether runs message last "also give the date"
    """
    async with connect() as client:
        accepted = await client.queue_message(await resolve_run_id(client, run), read_prompt(text))
    say(f"{accepted.run_id}: {accepted.status}")
    return 0
