"""The token store: create, list and revoke principals' bearer tokens in PostgreSQL, and
verify a presented token (through a short cache) into a `Principal`.

Tokens are `tth_` + 32 random bytes (urlsafe); only their sha256 is stored and compared
(`hmac.compare_digest` for the bootstrap token, an indexed equality for the rest: the
hash of a secret with 256 bits of entropy leaks nothing useful through timing).
`TETHER_OPERATOR_TOKEN` is the bootstrap admin of tenant `default`, kept only in memory.
Every change is a record in the `_tokens` audit trail; the token itself never is.
"""

from __future__ import annotations

import hmac
import secrets
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_common import audit
from tether_common.errors import AuthError, ErrorCode, NotFoundError
from tether_common.http import hash_token
from tether_common.identity.cache import TokenCache
from tether_common.identity.model import DEFAULT_TENANT, Principal
from tether_common.identity.tables import identity_heads, identity_tokens
from tether_common.messages.identity import CreateToken, TokenCreated, TokenList, TokenView

__all__ = [
    "BOOTSTRAP_NAME",
    "TOKENS_TRAIL",
    "TOKEN_PREFIX",
    "TokenStore",
    "Verifier",
    "bearer",
    "check_expiry",
    "new_token",
    "tokens_head",
]

# Token changes are not part of any run: they have a trail of their own.
TOKENS_TRAIL = "_tokens"
TOKEN_PREFIX = "tth_"
BOOTSTRAP_NAME = "operator"
MISSING = "a bearer token is required (Authorization: Bearer <token>)"


class Verifier(Protocol):
    """Turns a presented bearer token into a principal, or raises `AuthError`
    (`unauthenticated`, `token_expired`). The store and the bus client both are one."""

    async def authenticate(self, token: str | None) -> Principal: ...


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (anything else: None)."""
    if not authorization or authorization[:7].lower() != "bearer ":
        return None
    return authorization[7:].strip() or None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def check_expiry(who: Principal, now: datetime | None = None) -> Principal:
    """`who`, unless its token has expired (401 `token_expired`)."""
    if who.expires_at is not None and who.expires_at <= (now or datetime.now(UTC)):
        raise AuthError("the bearer token has expired", code=ErrorCode.TOKEN_EXPIRED)
    return who


def _names(raw: Any) -> frozenset[str] | None:
    return None if raw is None else frozenset(str(x) for x in raw)


def _principal(row: Any) -> Principal:
    return Principal(
        name=row.name,
        role=row.role,
        tenant=row.tenant,
        token_id=row.token_id,
        agents=_names(row.agents),
        owners=_names(row.owners),
        providers=_names(row.providers),
        models=_names(row.models),
        modes=_names(row.modes),
        groups=_names(row.groups) or frozenset(),
        expires_at=row.expires_at,
    )


def _view(row: Any) -> TokenView:
    return TokenView(
        token_id=row.token_id,
        name=row.name,
        role=row.role,
        tenant=row.tenant,
        agents=row.agents,
        owners=row.owners,
        providers=row.providers,
        models=row.models,
        modes=row.modes,
        groups=row.groups,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


async def _record(
    conn: AsyncConnection, event: str, data: Mapping[str, Any], sink: audit.JsonlSink | None
) -> None:
    """One `_tokens` record and its head, in the caller's transaction."""
    head = await audit.append(conn, TOKENS_TRAIL, event, data, sink=sink)
    now = datetime.now(UTC)
    stmt = insert(identity_heads).values(trail=TOKENS_TRAIL, head=head, updated_at=now)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[identity_heads.c.trail], set_={"head": head, "updated_at": now}
        )
    )


async def tokens_head(engine: AsyncEngine) -> str | None:
    """The kept head of the `_tokens` trail, for `audit.verify`."""
    async with engine.connect() as conn:
        found = (
            await conn.execute(
                select(identity_heads.c.head).where(identity_heads.c.trail == TOKENS_TRAIL)
            )
        ).scalar()
    return None if found is None else str(found)


class TokenStore:
    """The tokens in PostgreSQL; `authenticate` is the local `Verifier`."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        operator_token: str | None = None,
        operator_token_sha256: str | None = None,
        sink: audit.JsonlSink | None = None,
        cache: TokenCache | None = None,
    ) -> None:
        self.engine = engine
        self._bootstrap = hash_token(operator_token) if operator_token else operator_token_sha256
        self.sink = sink
        self.cache = cache if cache is not None else TokenCache()

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthError(MISSING, code=ErrorCode.UNAUTHENTICATED)
        digest = hash_token(token)
        if self._bootstrap is not None and hmac.compare_digest(digest, self._bootstrap):
            return Principal(BOOTSTRAP_NAME, "admin", DEFAULT_TENANT)
        cached = self.cache.get(digest)
        if cached is not None:
            return check_expiry(cached)
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(identity_tokens).where(
                        identity_tokens.c.token_hash == digest,
                        identity_tokens.c.revoked_at.is_(None),
                    )
                )
            ).first()
        if row is None:
            raise AuthError("the bearer token is not valid", code=ErrorCode.UNAUTHENTICATED)
        who = _principal(row)
        self.cache.put(digest, who)
        return check_expiry(who)

    async def holder(
        self, token_id: str | None, conn: AsyncConnection | None = None
    ) -> Principal | None:
        """The principal of token `token_id` as it stands now (None: the bootstrap admin,
        while `TETHER_OPERATOR_TOKEN` is set), or None when it is revoked, expired, unknown
        or no longer configured. Never cached: work done later in a principal's name (a
        schedule's runs) asks this each time. In `conn`'s transaction the token's row is
        locked for share, so a revocation waits until that transaction has committed."""
        if token_id is None:
            return Principal(BOOTSTRAP_NAME, "admin", DEFAULT_TENANT) if self._bootstrap else None
        query = select(identity_tokens).where(
            identity_tokens.c.token_id == token_id, identity_tokens.c.revoked_at.is_(None)
        )
        if conn is None:
            async with self.engine.connect() as own:
                row = (await own.execute(query)).first()
        else:
            row = (await conn.execute(query.with_for_update(read=True))).first()
        if row is None:
            return None
        who = _principal(row)
        return None if who.expires_at is not None and who.expires_at <= datetime.now(UTC) else who

    async def create(self, by: Principal, req: CreateToken) -> TokenCreated:
        by.require("tokens.manage", req.tenant)
        plain = new_token()
        now = datetime.now(UTC)
        expires = None if req.expires_in_s is None else now + timedelta(seconds=req.expires_in_s)
        values = req.model_dump(exclude={"version", "expires_in_s"}) | {
            "token_id": f"tok_{uuid.uuid4().hex[:20]}",
            "token_hash": hash_token(plain),
            "created_at": now,
            "created_by": by.label,
            "expires_at": expires,
        }
        async with self.engine.begin() as conn:
            stmt = identity_tokens.insert().values(values).returning(identity_tokens)
            row = (await conn.execute(stmt)).one()
            view = _view(row)
            data = view.model_dump(mode="json", exclude={"version", "revoked_at"})
            await _record(conn, "token.created", data | {"by": by.label}, self.sink)
        return TokenCreated(token=plain, info=view)

    async def all(self, by: Principal) -> TokenList:
        scope = by.reach("tokens.manage")
        stmt = select(identity_tokens).order_by(identity_tokens.c.created_at)
        if scope.tenant is not None:
            stmt = stmt.where(identity_tokens.c.tenant == scope.tenant)
        async with self.engine.connect() as conn:
            return TokenList(tokens=[_view(r) for r in await conn.execute(stmt)])

    async def revoke(self, by: Principal, token_id: str) -> TokenView:
        by.require("tokens.manage")
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(identity_tokens)
                    .where(
                        identity_tokens.c.token_id == token_id,
                        identity_tokens.c.revoked_at.is_(None),
                    )
                    .values(revoked_at=datetime.now(UTC))
                    .returning(identity_tokens)
                )
            ).first()
            if row is None or not by.sees("tokens.manage", row.tenant):
                # Rolled back with the transaction: out of reach is the same as absent.
                raise NotFoundError(f"no active token '{token_id}'")
            data = {"token_id": token_id, "name": row.name, "role": row.role}
            data |= {"tenant": row.tenant, "by": by.label}
            await _record(conn, "token.revoked", data, self.sink)
        self.cache.drop(token_id)
        return _view(row)
