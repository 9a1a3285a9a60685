"""The kill switch (`/v1/kill`): stop every run in scope and refuse new ones, lift it,
list the kills in force."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore

if TYPE_CHECKING:
    from tether_common.messages.kills import KillList, KillRequest, KillView, LiftRequest

__all__ = ["Kills"]


class Kills(ClientCore):
    """Kills: an admin's stop of everything in a scope."""

    async def kill(self, body: KillRequest) -> KillView:
        """Stop every running run in scope and refuse new ones until lifted (admin); the
        kill in force on that target (an existing one is returned as it was)."""
        from tether_common.messages.kills import KillView

        return await self._call(KillView, "POST", "/v1/kill", body)

    async def lift_kill(self, body: LiftRequest) -> KillView:
        """Lift the kill in force on the target (admin); 404 if there is none."""
        from tether_common.messages.kills import KillView

        return await self._call(KillView, "POST", "/v1/kill/lift", body)

    async def kills(self, *, lifted: bool = False) -> KillList:
        """The kills in force (with `lifted`, the lifted ones too) the caller may see."""
        from tether_common.messages.kills import KillList

        params = {"lifted": "true"} if lifted else None
        return await self._call(KillList, "GET", "/v1/kill", params=params)
