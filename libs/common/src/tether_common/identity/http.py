"""The identity's HTTP face: the `principal` dependency every protected route takes, and
the reusable `/v1/tokens` router (admin only; the plain token is shown once)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tether_common.http import PathId
from tether_common.identity.model import Principal
from tether_common.identity.tokens import TokenStore, Verifier
from tether_common.messages.identity import CreateToken, TokenCreated, TokenList, TokenView

__all__ = ["SCHEME", "Caller", "caller", "principal_dependency", "tokens_router"]

# Declared in each service's OpenAPI document as the security of every route that takes
# a principal, so a test can find a route that does not. Not `auto_error`: a missing or
# malformed header must answer our 401 body, not FastAPI's 403.
SCHEME = HTTPBearer(auto_error=False, scheme_name="bearer", description="A Tether token")


def principal_dependency(verifier: Verifier) -> Any:
    """`who: Principal = principal_dependency(verifier)` on a route: 401 `unauthenticated`
    without a valid token, 401 `token_expired` with an expired one."""

    async def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(SCHEME)],
    ) -> Principal:
        return await verifier.authenticate(
            None if credentials is None else credentials.credentials.strip()
        )

    return Depends(principal)


async def caller(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(SCHEME)],
    request: Request,
) -> Principal:
    """`who: Caller` on a module-level route: the principal as `principal_dependency`
    answers it (the same scheme, the same 401s), authenticated by the verifier the app
    holds on `app.state.verifier` (`Service.app` puts it there)."""
    verifier: Verifier = request.app.state.verifier
    return await verifier.authenticate(
        None if credentials is None else credentials.credentials.strip()
    )


Caller = Annotated[Principal, Depends(caller)]


def tokens_router(store: TokenStore) -> APIRouter:
    """`GET/POST /v1/tokens`, `DELETE /v1/tokens/{token_id}`: admin only."""
    router = APIRouter(prefix="/v1/tokens", tags=["tokens"])
    who_dep = principal_dependency(store)

    @router.post("", status_code=201)
    async def create_token(body: CreateToken, who: Principal = who_dep) -> TokenCreated:
        """Issue a token; the answer holds the plain token, the only time it is shown."""
        return await store.create(who, body)

    @router.get("")
    async def list_tokens(who: Principal = who_dep) -> TokenList:
        return await store.all(who)

    @router.delete("/{token_id}")
    async def revoke_token(token_id: PathId, who: Principal = who_dep) -> TokenView:
        """Revoke at once on this replica; on the others within the cache's TTL."""
        return await store.revoke(who, token_id)

    return router
