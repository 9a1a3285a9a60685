"""A `Verifier` over fixed tokens, for a policy router served without the identity
tables (tests and single-operator setups)."""

from __future__ import annotations

from collections.abc import Mapping

from tether_common.errors import AuthError, ErrorCode
from tether_common.http import hash_token
from tether_common.identity import DEFAULT_TENANT, Principal


class StaticVerifier:
    """A `Verifier` over fixed tokens (the operator token as the bootstrap admin, and
    owners' tokens): for a policy router served without the identity tables."""

    def __init__(self, operator_token: str | None, owner_tokens: Mapping[str, str]) -> None:
        self._known: dict[str, Principal] = {
            hash_token(token): Principal(owner, "owner", DEFAULT_TENANT)
            for owner, token in owner_tokens.items()
        }
        if operator_token:
            self._known[hash_token(operator_token)] = Principal("operator", "admin")

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthError("a bearer token is required", code=ErrorCode.UNAUTHENTICATED)
        found = self._known.get(hash_token(token))
        if found is None:
            raise AuthError("the bearer token is not valid", code=ErrorCode.UNAUTHENTICATED)
        return found
