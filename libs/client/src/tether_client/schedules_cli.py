"""`tether schedules add|list|show|pause|resume|remove`: runs started on a clock, through
the brain's `/v1/schedules` (an operator token; viewers list and show). A schedule's runs
run as whoever last added, replaced or resumed it."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from tether_client.console import Format, OutputOption, emit, fields_table, rows_table, say
from tether_client.session import blocking, connect
from tether_common.messages.schedules import ScheduleSpec, ScheduleView

__all__ = ["app"]

app = typer.Typer(
    help="Runs started on a clock: add, list, show, pause, resume, remove (cron or interval).",
    no_args_is_help=True,
)

IdArgument = Annotated[str, typer.Argument(help="The schedule (sch_…).", show_default=False)]


def _when(found: ScheduleView) -> str:
    if found.cron is not None:
        return f"{found.cron} ({found.timezone})"
    return f"every {found.interval_s}s"


def _shown(found: ScheduleView) -> dict[str, object]:
    return found.model_dump(mode="json", exclude={"version"})


@app.command("add")
@blocking
async def schedules_add(
    prompt: Annotated[str, typer.Argument(help="What each run is asked.", show_default=False)],
    cron: Annotated[
        str | None,
        typer.Option(help="minute hour day month weekday [second], read in --timezone."),
    ] = None,
    every: Annotated[
        int | None, typer.Option("--every", help="An interval in seconds instead of --cron.")
    ] = None,
    timezone: Annotated[str, typer.Option(help="The IANA zone --cron is read in.")] = "UTC",
    agent: Annotated[str | None, typer.Option(help="The agent each run uses.")] = None,
    name: Annotated[str | None, typer.Option(help="A name to know it by.")] = None,
    overlap: Annotated[
        Literal["skip", "queue", "allow"],
        typer.Option(help="A tick while the last run goes on: skip it, queue it, or allow it."),
    ] = "skip",
    catch_up: Annotated[
        Literal["skip", "run_once"],
        typer.Option(help="Ticks missed while no brain ran: skip them, or run once for all."),
    ] = "skip",
    max_steps: Annotated[int | None, typer.Option(help="Each run's step budget.")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Each run's cost budget.")] = None,
    paused: Annotated[bool, typer.Option(help="Add it paused.")] = False,
    output: OutputOption = Format.table,
) -> int:
    """Add a schedule; its runs run as you, with your rights as they are at each tick.

    Example: tether schedules add "Summarise yesterday's failures" --cron "0 7 * * 1-5" --timezone Europe/Berlin --agent ops
    """
    spec = ScheduleSpec(
        prompt=prompt,
        cron=cron,
        interval_s=every,
        timezone=timezone,
        agent=agent,
        name=name,
        overlap=overlap,
        catch_up=catch_up,
        max_steps=max_steps,
        max_cost=max_cost,
        enabled=not paused,
    )
    async with connect() as client:
        added = await client.add_schedule(spec)
    emit(_shown(added), output, fields_table(_shown(added)))
    return 0


@app.command("list")
@blocking
async def schedules_list(output: OutputOption = Format.table) -> int:
    """The schedules within reach: when, the next tick, the last run.

    Example: tether schedules list -o json
    """
    async with connect() as client:
        found = (await client.schedules()).schedules
    rows = [
        (
            s.schedule_id,
            s.name or "",
            _when(s),
            s.next_fire_at.isoformat(timespec="seconds") if s.next_fire_at else "(paused)",
            f"{s.last_run_id} {s.last_run_status or ''}".strip() if s.last_run_id else "",
            s.run_as,
        )
        for s in found
    ]
    columns = ["SCHEDULE", "NAME", "WHEN", "NEXT", "LAST RUN", "RUNS AS"]
    emit(found, output, rows_table(columns, rows) if rows else "no schedules")
    return 0


@app.command("show")
@blocking
async def schedules_show(schedule_id: IdArgument, output: OutputOption = Format.table) -> int:
    """One schedule: what, when, as whom, what it did last.

    Example: tether schedules show sch_0123
    """
    async with connect() as client:
        found = await client.schedule(schedule_id)
    emit(_shown(found), output, fields_table(_shown(found)))
    return 0


@app.command("pause")
@blocking
async def schedules_pause(schedule_id: IdArgument) -> int:
    """Stop firing (a run already going goes on).

    Example: tether schedules pause sch_0123
    """
    async with connect() as client:
        await client.pause_schedule(schedule_id)
    say(f"paused {schedule_id}")
    return 0


@app.command("resume")
@blocking
async def schedules_resume(schedule_id: IdArgument) -> int:
    """Fire again from the next tick after now; its runs now run as you.

    Example: tether schedules resume sch_0123
    """
    async with connect() as client:
        found = await client.resume_schedule(schedule_id)
    when = found.next_fire_at.isoformat(timespec="seconds") if found.next_fire_at else "?"
    say(f"resumed {schedule_id}: next at {when}, as {found.run_as}")
    return 0


@app.command("remove")
@blocking
async def schedules_remove(schedule_id: IdArgument) -> int:
    """Remove a schedule (its runs so far stay).

    Example: tether schedules remove sch_0123
    """
    async with connect() as client:
        await client.remove_schedule(schedule_id)
    say(f"removed {schedule_id}")
    return 0
