"""Operator tokens and what they allow: roles (`viewer` sees, `approver` decides, `admin`
also manages tokens) and an optional team scope (agents and/or owners).

Tokens are random and stored as sha256 hashes; `TETHER_OPERATOR_TOKEN` is an admin token
kept only in memory, so a fresh deployment has a way in without a CLI.
"""

from __future__ import annotations

import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.tables import tokens
from tether_approvals.trail import record
from tether_common import audit
from tether_common.errors import AuthError, NotFoundError
from tether_common.http import hash_token
from tether_common.messages.approvals import CreateToken, Role, TokenCreated, TokenView

# Token changes are not part of any run: they have a trail of their own.
TOKENS_TRAIL = "_tokens"
_RANK: dict[Role, int] = {"viewer": 0, "approver": 1, "admin": 2}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: `name` goes into `decided_by` and the audit trail."""

    name: str
    role: Role
    agents: frozenset[str] | None = None
    owners: frozenset[str] | None = None

    def may(self, role: Role) -> bool:
        return _RANK[self.role] >= _RANK[role]

    def require(self, role: Role) -> None:
        if not self.may(role):
            raise AuthError(f"the role '{self.role}' may not do this", code="forbidden")

    def sees(self, agent: str | None, owner: str | None) -> bool:
        """In scope when every limit the token has admits the request's agent and owner."""
        if self.agents is not None and agent not in self.agents:
            return False
        return self.owners is None or owner in self.owners


def _names(raw: Any) -> frozenset[str] | None:
    return None if raw is None else frozenset(str(x) for x in raw)


def _view(row: Any) -> TokenView:
    return TokenView(
        token_id=row.token_id,
        name=row.name,
        role=row.role,
        agents=row.agents,
        owners=row.owners,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


class TokenStore:
    def __init__(
        self, engine: AsyncEngine, operator_token: str | None, sink: audit.JsonlSink | None
    ) -> None:
        self.engine = engine
        self._bootstrap = hash_token(operator_token) if operator_token else None
        self.sink = sink

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthError("a bearer token is required (Authorization: Bearer <token>)")
        digest = hash_token(token)
        if self._bootstrap is not None and hmac.compare_digest(digest, self._bootstrap):
            return Principal("operator", "admin")
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(tokens).where(
                        tokens.c.token_hash == digest, tokens.c.revoked_at.is_(None)
                    )
                )
            ).first()
        if row is None:
            raise AuthError("the bearer token is not valid")
        return Principal(f"token:{row.name}", row.role, _names(row.agents), _names(row.owners))

    async def create(self, by: Principal, req: CreateToken) -> TokenCreated:
        by.require("admin")
        plain = f"tth_{secrets.token_urlsafe(32)}"
        values = {
            "token_id": f"tok_{uuid.uuid4().hex[:20]}",
            "name": req.name,
            "token_hash": hash_token(plain),
            "role": req.role,
            "agents": req.agents,
            "owners": req.owners,
            "created_at": datetime.now(UTC),
        }
        async with self.engine.begin() as conn:
            row = (await conn.execute(tokens.insert().values(values).returning(tokens))).one()
            data = {"token_id": row.token_id, "name": req.name, "role": req.role, "by": by.name}
            data |= {"agents": req.agents, "owners": req.owners}
            await record(conn, TOKENS_TRAIL, "token.created", data, self.sink)
        return TokenCreated(token=plain, info=_view(row))

    async def all(self, by: Principal) -> list[TokenView]:
        by.require("admin")
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(tokens).order_by(tokens.c.created_at))
            return [_view(r) for r in rows]

    async def revoke(self, by: Principal, token_id: str) -> TokenView:
        by.require("admin")
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(tokens)
                    .where(tokens.c.token_id == token_id, tokens.c.revoked_at.is_(None))
                    .values(revoked_at=datetime.now(UTC))
                    .returning(tokens)
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no active token '{token_id}'")
            data = {"token_id": token_id, "by": by.name}
            await record(conn, TOKENS_TRAIL, "token.revoked", data, self.sink)
        return _view(row)
