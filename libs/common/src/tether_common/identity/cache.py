"""A short-lived, bounded cache of verified tokens, keyed by the token's hash.

Why short: a revocation on one replica reaches the others only when their entry ages
out, so the TTL is the bound on how long a revoked (or expired-by-clock, see
`TokenCache.get`) token still works anywhere. Why bounded: keys come from callers, and
an attacker sending random tokens must not grow the process.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tether_common.identity.model import Principal

DEFAULT_TTL_S = 2.0
DEFAULT_MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    fetched_at: float


class TokenCache:
    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def get(self, digest: str) -> Principal | None:
        """The cached principal, if fetched less than `ttl_s` ago (expiry by date is
        checked by the caller on every use, cached or not)."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if self._clock() - entry.fetched_at >= self.ttl_s:
            del self._entries[digest]
            return None
        return entry.principal

    def put(self, digest: str, principal: Principal) -> None:
        if self.ttl_s <= 0:
            return
        self._entries[digest] = _Entry(principal, self._clock())
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def drop(self, token_id: str) -> None:
        """Forget every entry of `token_id` (a revocation on this replica)."""
        for digest in [d for d, e in self._entries.items() if e.principal.token_id == token_id]:
            del self._entries[digest]

    def clear(self) -> None:
        self._entries.clear()
