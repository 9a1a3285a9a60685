"""Memory across threads (`/v1/memory`): what is kept, a search as a run would make it,
keep one, forget one or all of an owner's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore, given, tenant_param

if TYPE_CHECKING:
    from tether_common.messages.memory import MemoryForgotten, MemoryList, MemoryView

__all__ = ["Memory"]


class Memory(ClientCore):
    """Memories kept for users and agents."""

    async def memories(
        self,
        *,
        owner: str | None = None,
        agent: str | None = None,
        agent_wide: bool = False,
        tenant: str | None = None,
    ) -> MemoryList:
        """What is kept, newest first: the caller's own (a user), or its tenant's (an
        operator), narrowed by `owner` and `agent`; `agent_wide`: agents' own only."""
        from tether_common.messages.memory import MemoryList

        params = given(owner=owner, agent=agent, tenant=tenant)
        if agent_wide:
            params["agent_wide"] = "true"
        return await self._call(MemoryList, "GET", "/v1/memory", params=params)

    async def search_memory(
        self,
        query: str,
        *,
        agent: str | None = None,
        owner: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> MemoryList:
        """What a run of `owner` (a user: itself) with `agent` would find, best first."""
        from tether_common.messages.memory import MemoryList

        params = given(query=query, agent=agent, owner=owner, tenant=tenant, limit=limit)
        return await self._call(MemoryList, "GET", "/v1/memory/search", params=params)

    async def add_memory(
        self,
        text: str,
        *,
        agent: str | None = None,
        owner: str | None = None,
        agent_wide: bool = False,
        tenant: str | None = None,
    ) -> MemoryView:
        """Keep a memory for `owner` (None: the caller) with `agent`, or for every user
        of the agent (`agent_wide`, operators only)."""
        from tether_common.messages.memory import AddMemory, MemoryView

        body = AddMemory(text=text, agent=agent, owner=owner, agent_wide=agent_wide, tenant=tenant)
        return await self._call(MemoryView, "POST", "/v1/memory", body)

    async def forget_memory(self, memory_id: str, *, tenant: str | None = None) -> None:
        """Forget one memory (404: none within reach)."""
        await self._send("DELETE", f"/v1/memory/{memory_id}", params=tenant_param(tenant))

    async def forget_memories(
        self, *, owner: str | None = None, agent: str | None = None, tenant: str | None = None
    ) -> MemoryForgotten:
        """Forget everything kept about `owner` (None: the caller), with `agent` or any."""
        from tether_common.messages.memory import MemoryForgotten

        params = given(owner=owner, agent=agent, tenant=tenant)
        return await self._call(MemoryForgotten, "DELETE", "/v1/memory", params=params)
