"""Schedules (`/v1/schedules`): runs started on a cron — add, list, read, replace,
pause, resume, remove."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore

if TYPE_CHECKING:
    from tether_common.messages.schedules import ScheduleList, ScheduleSpec, ScheduleView

__all__ = ["Schedules"]


class Schedules(ClientCore):
    """A tenant's schedules of runs."""

    async def add_schedule(self, spec: ScheduleSpec) -> ScheduleView:
        """Add a schedule to the caller's tenant (operator); its runs run as the caller."""
        from tether_common.messages.schedules import ScheduleView

        return await self._call(ScheduleView, "POST", "/v1/schedules", spec)

    async def schedules(self) -> ScheduleList:
        """The schedules within reach, soonest first, with their next tick and last run."""
        from tether_common.messages.schedules import ScheduleList

        return await self._call(ScheduleList, "GET", "/v1/schedules")

    async def schedule(self, schedule_id: str) -> ScheduleView:
        from tether_common.messages.schedules import ScheduleView

        return await self._call(ScheduleView, "GET", f"/v1/schedules/{schedule_id}")

    async def replace_schedule(self, schedule_id: str, spec: ScheduleSpec) -> ScheduleView:
        """Replace it (`spec.schedule_version`: the version read; 409 if it moved on);
        from now on its runs run as the caller."""
        from tether_common.messages.schedules import ScheduleView

        return await self._call(ScheduleView, "PUT", f"/v1/schedules/{schedule_id}", spec)

    async def pause_schedule(self, schedule_id: str) -> ScheduleView:
        from tether_common.messages.schedules import ScheduleView

        return await self._call(ScheduleView, "POST", f"/v1/schedules/{schedule_id}/pause")

    async def resume_schedule(self, schedule_id: str) -> ScheduleView:
        """Fire again from the next tick after now, as the caller."""
        from tether_common.messages.schedules import ScheduleView

        return await self._call(ScheduleView, "POST", f"/v1/schedules/{schedule_id}/resume")

    async def remove_schedule(self, schedule_id: str) -> None:
        await self._send("DELETE", f"/v1/schedules/{schedule_id}")
