"""The identity on the bus: services holding the tables answer `identity.verify` (queue
group `identity`); services without them verify through `RemoteVerifier`; a request
handler reads its caller's token from the message's `Authorization` header with
`bus_principal`."""

from __future__ import annotations

from tether_common.bus import Bus, message_headers
from tether_common.errors import AuthError, ErrorCode
from tether_common.http import hash_token
from tether_common.identity.cache import TokenCache
from tether_common.identity.model import Principal
from tether_common.identity.tokens import MISSING, Verifier, bearer, check_expiry
from tether_common.messages.identity import PrincipalView, VerifyToken

__all__ = ["RemoteVerifier", "bearer_headers", "bus_principal", "serve_verify"]


def bearer_headers(token: str) -> dict[str, str]:
    """The headers a NATS caller sends with its request (`Bus.request(..., headers=)`)."""
    return {"Authorization": f"Bearer {token}"}


async def serve_verify(bus: Bus, verifier: Verifier) -> None:
    """Answer `identity.verify` from this service's tables (call from `on_start`)."""

    async def verify(req: VerifyToken) -> PrincipalView:
        return (await verifier.authenticate(req.token)).view()

    await bus.serve(bus.subjects.identity_verify, verify)


class RemoteVerifier:
    """A `Verifier` for services without the identity tables: asks over the bus, and
    keeps answers as briefly as the store's own cache (the same revocation bound)."""

    def __init__(self, bus: Bus, cache: TokenCache | None = None, timeout_s: float = 5.0) -> None:
        self.bus = bus
        self.cache = cache if cache is not None else TokenCache()
        self.timeout_s = timeout_s

    async def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise AuthError(MISSING, code=ErrorCode.UNAUTHENTICATED)
        digest = hash_token(token)
        cached = self.cache.get(digest)
        if cached is not None:
            return check_expiry(cached)
        view = await self.bus.request(
            self.bus.subjects.identity_verify, VerifyToken(token=token), timeout=self.timeout_s
        )
        who = Principal.of(view)
        self.cache.put(digest, who)
        return check_expiry(who)


async def bus_principal(verifier: Verifier) -> Principal:
    """The caller of the request being handled, from its `Authorization` header; raises
    `AuthError` (`unauthenticated`, `token_expired`), which `Bus.serve` answers as a
    structured `ErrorReply`. Check the action with `who.require(...)` after."""
    return await verifier.authenticate(bearer(message_headers().get("Authorization")))
