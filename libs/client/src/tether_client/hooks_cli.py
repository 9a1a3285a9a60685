"""`tether hooks add|list|show|remove`: a tenant's lifecycle hooks, through the brain's
`/v1/hooks` (a token that may `policy.write` to change them, `policy.read` to read). An
https hook's signing secret is printed once, when it is added."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from tether_client.console import Format, OutputOption, emit, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import ErrorCode, MessageError
from tether_common.messages.hooks import AddHook, HookList, HookView

__all__ = ["app"]

app = typer.Typer(
    help="Lifecycle hooks: checks a tenant runs before and after tools, before answers.",
    no_args_is_help=True,
)

TenantOption = Annotated[
    str | None, typer.Option(help="The tenant (admins; others always act on their own).")
]


def table(hooks: list[HookView]) -> Table:
    rows = [
        (h.name, h.point, h.transport, h.target, f"{h.timeout_s:g}s", h.failure, ",".join(h.tools))
        for h in hooks
    ]
    return rows_table(("name", "point", "transport", "target", "timeout", "failure", "tools"), rows)


def _options(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise MessageError(
            f"--options is not JSON: {exc}", code=ErrorCode.INVALID_REQUEST
        ) from None
    if not isinstance(found, dict):
        raise MessageError("--options is a JSON object", code=ErrorCode.INVALID_REQUEST)
    return found


@app.command("add")
@blocking
async def hooks_add(
    name: Annotated[str, typer.Argument(help="The hook's name.", show_default=False)],
    point: Annotated[
        str, typer.Option(help="before_tool | after_tool | before_answer | on_run_end")
    ],
    transport: Annotated[str, typer.Option(help="nats | https | builtin")],
    target: Annotated[
        str,
        typer.Option(
            help="nats: the service name; https: the URL; builtin: "
            "redact_secrets | detect_pii | deny_topics"
        ),
    ],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for its answer.")] = 5.0,
    failure: Annotated[str, typer.Option(help="fail_closed | fail_open")] = "fail_closed",
    tool: Annotated[
        list[str] | None, typer.Option("--tool", help="Only calls of this tool (glob; repeat).")
    ] = None,
    options: Annotated[
        str | None, typer.Option(help='A built-in\'s options as JSON, e.g. {"topics": ["x"]}')
    ] = None,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """Add a hook, asked after the tenant's others at its point.

    Example: tether hooks add no-secrets --point after_tool --transport builtin --target redact_secrets
    """
    body = AddHook.model_validate(
        {
            "name": name,
            "point": point,
            "transport": transport,
            "target": target,
            "timeout_s": timeout,
            "failure": failure,
            "tools": tool or [],
            "options": _options(options),
            "tenant": tenant,
        }
    )
    async with connect() as client:
        created = await client.add_hook(body)
    emit(created, output, table([created]))
    if created.secret and output == Format.table:
        say(f"signing secret (shown once): {created.secret}")
    return 0


@app.command("list")
@blocking
async def hooks_list(tenant: TenantOption = None, output: OutputOption = Format.table) -> int:
    """The tenant's hooks, in the order they are asked.

    Example: tether hooks list -o json
    """
    async with connect() as client:
        found: HookList = await client.hooks(tenant=tenant)
    emit(found, output, table(found.hooks))
    return 0


@app.command("show")
@blocking
async def hooks_show(
    name: Annotated[str, typer.Argument(help="The hook's name.", show_default=False)],
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """One hook (its secret is never shown again).

    Example: tether hooks show no-secrets
    """
    async with connect() as client:
        hook = await client.hook(name, tenant=tenant)
    emit(hook, output, table([hook]))
    return 0


@app.command("remove")
@blocking
async def hooks_remove(
    name: Annotated[str, typer.Argument(help="The hook's name.", show_default=False)],
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> int:
    """Remove a hook; runs stop asking it within the brains' refresh (2 s by default).

    Example: tether hooks remove no-secrets
    """
    async with connect() as client:
        removed = await client.remove_hook(name, tenant=tenant)
    emit(removed, output, f"removed hook {removed.name} (version {removed.version})")
    return 0
