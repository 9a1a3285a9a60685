"""Lifecycle hooks (`/v1/hooks`): add one to a tenant's, list them, read one, remove one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore

if TYPE_CHECKING:
    from tether_common.messages.hooks import AddHook, HookCreated, HookList, HookRemoved, HookView

__all__ = ["Hooks"]


class Hooks(ClientCore):
    """A tenant's lifecycle hooks."""

    async def add_hook(self, body: AddHook) -> HookCreated:
        """Add a hook to the tenant's (operators; an admin names `body.tenant`). An https
        hook's signing secret is in the answer, and never again."""
        from tether_common.messages.hooks import HookCreated

        return await self._call(HookCreated, "POST", "/v1/hooks", body)

    async def hooks(self, *, tenant: str | None = None) -> HookList:
        """The tenant's hooks, in the order they are asked."""
        from tether_common.messages.hooks import HookList

        params = {"tenant": tenant} if tenant else None
        return await self._call(HookList, "GET", "/v1/hooks", params=params)

    async def hook(self, name: str, *, tenant: str | None = None) -> HookView:
        from tether_common.messages.hooks import HookView

        params = {"tenant": tenant} if tenant else None
        return await self._call(HookView, "GET", f"/v1/hooks/{name}", params=params)

    async def remove_hook(self, name: str, *, tenant: str | None = None) -> HookRemoved:
        from tether_common.messages.hooks import HookRemoved

        params = {"tenant": tenant} if tenant else None
        return await self._call(HookRemoved, "DELETE", f"/v1/hooks/{name}", params=params)
