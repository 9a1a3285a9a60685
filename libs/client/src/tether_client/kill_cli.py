"""`tether kill --tenant T | --agent A [--tenant T] | --all [--reason …]`, `tether kill
--lift …` and `tether kill --list`: the kill switch, through the brain's `/v1/kill` (an
admin token to set or lift one; `--list` for whoever may see them)."""

from __future__ import annotations

from typing import Annotated

import typer

from tether_client.console import Format, OutputOption, emit, err
from tether_client.session import blocking, connect
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.kills import KillRequest, KillScope, KillView, LiftRequest

__all__ = ["kill_command", "line"]


def line(kill: KillView) -> str:
    """One kill: its id, target, who set it and when, why; lifted, by whom and when."""
    target = {"all": "all runs", "tenant": f"tenant {kill.tenant}"}.get(
        kill.scope, f"agent {kill.agent} (tenant {kill.tenant})"
    )
    parts = [f"kill {kill.kill_id}", target, f"by {kill.killed_by}", f"{kill.killed_at:%F %T}"]
    if kill.reason:
        parts.append(f"reason: {kill.reason}")
    if kill.lifted_at is not None:
        parts.append(f"lifted by {kill.lifted_by} {kill.lifted_at:%F %T}")
    return "  ".join(parts)


def scope_of(everything: bool, tenant: str | None, agent: str | None) -> KillScope:
    """Which target the options name: exactly one of --all, --tenant, --agent (with the
    agent's --tenant)."""
    if everything and (tenant or agent):
        raise MessageError("--all names no tenant and no agent", code=ErrorCode.INVALID_REQUEST)
    if everything:
        return "all"
    if agent:
        return "agent"
    if tenant:
        return "tenant"
    raise MessageError(
        "say what to kill: --all, --tenant T, or --agent A [--tenant T]",
        code=ErrorCode.INVALID_REQUEST,
    )


@blocking
async def kill_command(
    everything: Annotated[
        bool, typer.Option("--all", help="Every run of every tenant.", show_default=False)
    ] = False,
    tenant: Annotated[
        str | None, typer.Option(help="A tenant's runs (with --agent: the agent's tenant).")
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="One agent's runs (its tenant: --tenant, else yours).")
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why, for the record and refusals.")] = None,
    lift: Annotated[
        bool, typer.Option("--lift", help="Lift the kill on this target instead.")
    ] = False,
    listing: Annotated[
        bool, typer.Option("--list", help="Show the kills in force (with --lifted: all).")
    ] = False,
    lifted: Annotated[bool, typer.Option(help="With --list: the lifted ones too.")] = False,
    output: OutputOption = Format.table,
) -> int:
    """Stop every running run of a tenant, an agent or all, and refuse new ones (`killed`)
    until lifted (admin); survives restarts, recorded in the `policy` audit trail.

    Example: tether kill --tenant acme --reason "runaway spend"; tether kill --lift --tenant acme
    """
    async with connect() as client:
        if listing:
            found = (await client.kills(lifted=lifted)).kills
            emit(found, output, "\n".join(map(line, found)) or "no kill switch in force")
            return 0
        scope = scope_of(everything, tenant, agent)
        if lift:
            done = await client.lift_kill(
                LiftRequest(scope=scope, tenant=tenant, agent=agent, reason=reason)
            )
        else:
            done = await client.kill(
                KillRequest(scope=scope, tenant=tenant, agent=agent, reason=reason)
            )
    emit(done, output, line(done))
    if not lift and output is Format.table:
        err(f"lift it with: tether kill --lift {_target_options(done)}", "dim")
    return 0


def _target_options(kill: KillView) -> str:
    if kill.scope == "all":
        return "--all"
    if kill.scope == "tenant":
        return f"--tenant {kill.tenant}"
    return f"--agent {kill.agent} --tenant {kill.tenant}"
