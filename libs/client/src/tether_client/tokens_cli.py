"""`tether tokens create|list|revoke`: principals' bearer tokens, through the brain's
`/v1/tokens` (an admin token: `TETHER_TOKEN` or the operator token)."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from tether_client.console import Format, OutputOption, emit, say, to_data
from tether_client.session import blocking, connect
from tether_common.errors import MessageError
from tether_common.messages.identity import DEFAULT_TENANT, CreateToken, Role, TokenView

__all__ = ["app", "duration_s"]

app = typer.Typer(help="Principals' bearer tokens (admin).", no_args_is_help=True)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration_s(text: str) -> float:
    """`90`, `90s`, `45m`, `12h`, `30d`, `2w` in seconds."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise MessageError(
            f"--expires takes a duration such as 30d, 12h or 45m, not {text!r}",
            code="invalid_request",
        )
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def names(text: str | None) -> list[str] | None:
    """`a,b` as a list (None: no limit)."""
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def line(token: TokenView) -> str:
    state = "revoked" if token.revoked_at else "active"
    expires = f"expires {token.expires_at:%Y-%m-%d %H:%M}" if token.expires_at else "no expiry"
    limits = [
        f"{kind}={','.join(values)}"
        for kind, values in (
            ("agents", token.agents),
            ("owners", token.owners),
            ("providers", token.providers),
            ("models", token.models),
            ("modes", token.modes),
            ("groups", token.groups),
        )
        if values is not None
    ]
    return "  ".join(
        [
            token.token_id,
            f"{token.name:16}",
            f"{token.role:8}",
            f"{token.tenant:12}",
            state,
            expires,
            *limits,
        ]
    )


def limit_option(kind: str) -> Any:
    return typer.Option(help=f"Comma-separated {kind} it may use (default: all).")


@app.command("create")
@blocking
async def tokens_create(
    name: Annotated[str, typer.Option(help="The principal (a run's owner).")],
    role: Annotated[Role, typer.Option(help="What it may do.")],
    tenant: Annotated[str, typer.Option(help="Its team.")] = DEFAULT_TENANT,
    expires: Annotated[
        str | None, typer.Option(help="Lifetime: 90s, 45m, 12h, 30d, 2w (default: none).")
    ] = None,
    agents: Annotated[str | None, limit_option("agents")] = None,
    owners: Annotated[str | None, limit_option("owners")] = None,
    providers: Annotated[str | None, limit_option("providers")] = None,
    models: Annotated[str | None, limit_option("models")] = None,
    modes: Annotated[str | None, limit_option("modes")] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            help="An approver group it belongs to (repeat, or a,b); a quorum may require one.",
        ),
    ] = None,
) -> int:
    """Issue a token; it is printed once, on a line of its own.

    Example: tether tokens create --name alice --role client --expires 30d
    Example: tether tokens create --name bob --role approver --group sre --group leads
    """
    body = CreateToken(
        name=name,
        role=role,
        tenant=tenant,
        agents=names(agents),
        owners=names(owners),
        providers=names(providers),
        models=names(models),
        modes=names(modes),
        groups=None if group is None else [g for text in group for g in names(text) or []],
        expires_in_s=None if expires is None else duration_s(expires),
    )
    async with connect() as client:
        created = await client.create_token(body)
    say(line(created.info))
    # The only time the token is shown: on a line of its own, easy to copy or pipe.
    say(created.token)
    return 0


@app.command("list")
@blocking
async def tokens_list(output: OutputOption = Format.table) -> int:
    """Every token you may see (never the token itself).

    Example: tether tokens list -o json
    """
    async with connect() as client:
        found = await client.list_tokens()
    lines = "\n".join(line(t) for t in found.tokens) or "no tokens"
    emit(to_data(found.tokens), output, lines)
    return 0


@app.command("revoke")
@blocking
async def tokens_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (tok_…).", show_default=False)],
) -> int:
    """Revoke a token by its id; every service refuses it within seconds.

    Example: tether tokens revoke tok_1234
    """
    async with connect() as client:
        say(line(await client.revoke_token(token_id)))
    return 0
