"""`MemoryHooks` (`hooks.HookSource`): a tenant's hooks given by the test, as the store
would answer them."""

from __future__ import annotations

from collections.abc import Iterable

from tether_brain.hooks import StoredHook, TenantHooks
from tether_common.messages.hooks import HookSpec


class MemoryHooks:
    def __init__(self, hooks: Iterable[HookSpec] = (), *, tenant: str = "default") -> None:
        self.by_tenant = {tenant: [StoredHook(h, "hksec_test-secret") for h in hooks]}

    async def of(self, tenant: str) -> TenantHooks:
        hooks = self.by_tenant.get(tenant, [])
        return TenantHooks(tenant, tuple(hooks), 1 if hooks else 0)
