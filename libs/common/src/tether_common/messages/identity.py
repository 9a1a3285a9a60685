"""Principals and their bearer tokens on the wire: the `/v1/tokens` bodies, and the
`identity.verify` conversation by which services without the identity tables (gateway,
tools-runner) have a token checked by one that holds them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest

# `viewer` only reads (the approvals service's read-only role, kept for its tokens).
Role = Literal["admin", "operator", "approver", "owner", "client", "viewer"]
ROLES: tuple[Role, ...] = ("admin", "operator", "approver", "owner", "client", "viewer")
DEFAULT_TENANT = "default"
MAX_TOKEN_LIFETIME_S = 10 * 366 * 86400
GroupName = Annotated[str, Field(pattern=ID_PATTERN, max_length=200)]


class CreateToken(WireRequest):
    """`POST /v1/tokens`: a new principal's token (admin only)."""

    name: str = Field(min_length=1, max_length=200, pattern=ID_PATTERN)
    role: Role
    tenant: str = Field(default=DEFAULT_TENANT, pattern=ID_PATTERN, max_length=200)
    # The approvals team scope: only approvals of these agents / run owners (None: all).
    agents: list[str] | None = Field(default=None, max_length=1000)
    owners: list[str] | None = Field(default=None, max_length=1000)
    providers: list[str] | None = Field(default=None, max_length=1000)
    models: list[str] | None = Field(default=None, max_length=1000)
    modes: list[str] | None = Field(default=None, max_length=100)
    # The approver groups (teams) it belongs to: a quorum may require one of them.
    groups: list[GroupName] | None = Field(default=None, max_length=100)
    # None: the token never expires.
    expires_in_s: float | None = Field(default=None, gt=0, le=MAX_TOKEN_LIFETIME_S)


class TokenView(WireModel):
    """A token as listed: never the token, never its hash."""

    token_id: str
    name: str
    role: Role
    tenant: str = DEFAULT_TENANT
    agents: list[str] | None = None
    owners: list[str] | None = None
    providers: list[str] | None = None
    models: list[str] | None = None
    modes: list[str] | None = None
    groups: list[str] | None = None
    created_at: datetime
    created_by: str | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


class TokenCreated(WireModel):
    """The plain token is shown once; only its hash is stored."""

    token: str
    info: TokenView


class TokenList(WireModel):
    tokens: list[TokenView]


class VerifyToken(WireRequest):
    """Service to service: who holds this bearer token? (the reply never echoes it)."""

    token: str = Field(min_length=1, max_length=512)


class PrincipalView(WireModel):
    """A verified principal, as `Principal` carries it."""

    name: str
    role: Role
    tenant: str
    token_id: str | None = None
    agents: list[str] | None = None
    owners: list[str] | None = None
    providers: list[str] | None = None
    models: list[str] | None = None
    modes: list[str] | None = None
    groups: list[str] | None = None
    expires_at: datetime | None = None
