"""`tether tokens create|list|revoke`: principals' bearer tokens, through the brain's
`/v1/tokens` (an admin token: `TETHER_TOKEN` or the operator token)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import get_args

from tether_client.client import TetherClient
from tether_client.ops_cli import client_token, say
from tether_common.errors import MessageError
from tether_common.messages.identity import DEFAULT_TENANT, CreateToken, Role, TokenView

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


async def tokens_create(args: argparse.Namespace, api_url: str) -> int:
    body = CreateToken(
        name=args.name,
        role=args.role,
        tenant=args.tenant,
        agents=names(args.agents),
        owners=names(args.owners),
        providers=names(args.providers),
        models=names(args.models),
        modes=names(args.modes),
        expires_in_s=None if args.expires is None else duration_s(args.expires),
    )
    async with TetherClient(api_url, token=client_token()) as client:
        created = await client.create_token(body)
    say(line(created.info))
    # The only time the token is shown: on a line of its own, easy to copy or pipe.
    say(created.token)
    return 0


async def tokens_list(_args: argparse.Namespace, api_url: str) -> int:
    async with TetherClient(api_url, token=client_token()) as client:
        found = await client.list_tokens()
    for token in found.tokens:
        say(line(token))
    if not found.tokens:
        say("no tokens")
    return 0


async def tokens_revoke(args: argparse.Namespace, api_url: str) -> int:
    async with TetherClient(api_url, token=client_token()) as client:
        say(line(await client.revoke_token(args.token_id)))
    return 0


def add_subcommands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], api_url: Callable[[], str]
) -> None:
    """Register `tokens create|list|revoke` on the `tether` parser."""
    tokens = sub.add_parser("tokens", help="principals' bearer tokens (admin)").add_subparsers(
        dest="action", required=True
    )

    async def run_create(args: argparse.Namespace) -> int:
        return await tokens_create(args, api_url())

    async def run_list(args: argparse.Namespace) -> int:
        return await tokens_list(args, api_url())

    async def run_revoke(args: argparse.Namespace) -> int:
        return await tokens_revoke(args, api_url())

    create = tokens.add_parser("create", help="issue a token; it is printed once")
    create.add_argument("--name", required=True, help="the principal (a run's owner)")
    create.add_argument("--role", required=True, choices=get_args(Role))
    create.add_argument("--tenant", default=DEFAULT_TENANT)
    create.add_argument("--expires", help="lifetime: 90s, 45m, 12h, 30d, 2w (default: none)")
    for limit in ("agents", "owners", "providers", "models", "modes"):
        create.add_argument(f"--{limit}", help=f"comma-separated {limit} it may use (default: all)")
    create.set_defaults(fn=run_create)
    tokens.add_parser("list", help="every token (never the token itself)").set_defaults(fn=run_list)
    revoke = tokens.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id")
    revoke.set_defaults(fn=run_revoke)
