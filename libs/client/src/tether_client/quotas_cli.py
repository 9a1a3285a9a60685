"""`tether quota show TENANT` and `tether quota set TENANT [--tokens-per-day N …]`: a
tenant's quota and what is used of it now, through the brain's `/v1/quotas/{tenant}`
(setting one: an admin token; showing: admins and the tenant's operators). An agent's
quota is part of its definition (`tether agents apply`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from tether_client.console import Format, OutputOption, emit, rows_table
from tether_client.session import blocking, connect
from tether_common.messages.quotas import Quota, QuotaView

__all__ = ["app"]

app = typer.Typer(help="Tenants' quotas: tokens, cost, runs a minute, concurrent runs.")


def _count(what: str) -> Any:
    return typer.Option(min=0, show_default=False, help=what)


def _money(what: str) -> Any:
    return typer.Option(min=0.0, show_default=False, help=what)


def table(view: QuotaView) -> Table:
    """Each limit, what is used of it and when that use next drops."""
    rows = [
        (
            u.limit,
            "-" if u.allowed is None else f"{u.allowed:g}",
            f"{u.used:g}",
            "-" if u.resets_at is None else f"{u.resets_at:%F %T}",
        )
        for u in view.usage
    ]
    return rows_table(("limit", "allowed", "used", "resets"), rows)


@app.command("show")
@blocking
async def show_command(
    tenant: Annotated[str, typer.Argument(help="The tenant.")],
    output: OutputOption = Format.table,
) -> int:
    """A tenant's quota and its use now (the hour and day are UTC's).

    Example: tether quota show acme
    """
    async with connect() as client:
        view = await client.quota(tenant)
    emit(view, output, table(view))
    return 0


@app.command("set")
@blocking
async def set_command(
    tenant: Annotated[str, typer.Argument(help="The tenant.")],
    concurrent_runs: Annotated[
        int | None, _count("Runs not yet ended at once (0: none may start).")
    ] = None,
    runs_per_minute: Annotated[int | None, _count("Runs started in any 60 seconds.")] = None,
    tokens_per_hour: Annotated[int | None, _count("Model tokens in the current UTC hour.")] = None,
    tokens_per_day: Annotated[int | None, _count("Model tokens in the current UTC day.")] = None,
    cost_per_hour: Annotated[float | None, _money("Model cost in the current UTC hour.")] = None,
    cost_per_day: Annotated[float | None, _money("Model cost in the current UTC day.")] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Drop the limits not given here (else kept).")
    ] = False,
    output: OutputOption = Format.table,
) -> int:
    """Set limits of a tenant's quota (admin); the others are kept unless --clear.

    Example: tether quota set acme --tokens-per-day 2000000 --concurrent-runs 20
    """
    given = {
        "concurrent_runs": concurrent_runs,
        "runs_per_minute": runs_per_minute,
        "tokens_per_hour": tokens_per_hour,
        "tokens_per_day": tokens_per_day,
        "cost_per_hour": cost_per_hour,
        "cost_per_day": cost_per_day,
    }
    async with connect() as client:
        current = await client.quota(tenant)
        kept = {} if clear else current.quota.model_dump(exclude_none=True)
        quota = Quota.model_validate(kept | {k: v for k, v in given.items() if v is not None})
        view = await client.set_quota(tenant, quota, version=current.version)
    emit(view, output, table(view))
    return 0
