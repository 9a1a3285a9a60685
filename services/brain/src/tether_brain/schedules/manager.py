"""Schedules as the client sees them: add, list, show, replace, pause, resume, remove.

Who may (`schedules.read`, `schedules.manage` in the identity model): a tenant's
operators manage its schedules, its viewers and approvers read them, admins reach every
tenant's. Another tenant's schedule is a 404, as if missing.

As whom its runs run: the principal that last created, replaced or resumed it (`run_as`),
never anyone else; so setting a schedule going is checked as starting its run is (the
writer's role, limits, the agent, provider and model, 403/404/422), and a writer of
another tenant (an admin) may pause or remove a schedule but not set it going (its runs
would belong to the admin's tenant). Another operator changing a colleague's schedule
makes it run as themselves: nobody borrows another's rights through a schedule. The
scheduler looks the principal up again at every tick (`firing.py`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from tether_brain.runs.manager import RunManager
from tether_brain.schedules.firing import start_request
from tether_brain.schedules.store import ScheduleRow, ScheduleStore
from tether_brain.schedules.timing import timing_of
from tether_common.errors import AuthError, ErrorCode
from tether_common.identity import Principal
from tether_common.messages.schedules import ScheduleList, ScheduleSpec, ScheduleView

BUDGETS = ("max_steps", "max_tool_calls", "max_cost", "max_tokens", "max_seconds")


def view(row: ScheduleRow) -> ScheduleView:
    return ScheduleView(
        schedule_id=row.schedule_id,
        tenant=row.tenant,
        name=row.name,
        cron=row.cron,
        timezone=row.timezone,
        interval_s=row.interval_s,
        agent=row.agent,
        provider=row.provider,
        model=row.model,
        prompt=row.prompt,
        budgets=row.budgets,
        overlap=row.overlap,
        catch_up=row.catch_up,
        enabled=row.enabled,
        paused_reason=row.paused_reason,
        run_as=row.run_as,
        next_fire_at=row.next_fire_at if row.enabled else None,
        pending_tick=row.pending_tick,
        last_tick_at=row.last_tick_at,
        last_run_id=row.last_run_id,
        last_run_status=row.last_run_status,
        fired=row.fired,
        skipped=row.skipped,
        last_error=row.last_error,
        schedule_version=row.version,
        created_by=row.created_by,
        created_at=row.created_at,
        changed_by=row.changed_by,
        changed_at=row.changed_at,
    )


class ScheduleManager:
    def __init__(self, store: ScheduleStore, runs: RunManager) -> None:
        self.store = store
        self.runs = runs

    def _definition(self, spec: ScheduleSpec, who: Principal, now: datetime) -> dict[str, Any]:
        """The columns `spec` sets, checked: its clock (422 for a bad cron, zone or
        interval), and its run as `who` would start it now (403/404/422/409)."""
        timing = timing_of(
            cron=spec.cron, timezone=spec.timezone, interval_s=spec.interval_s, anchor=now
        )
        budgets = {k: v for k in BUDGETS if (v := getattr(spec, k)) is not None}
        values: dict[str, Any] = spec.model_dump(
            include={"name", "cron", "timezone", "interval_s", "agent", "provider", "model"}
            | {"prompt", "overlap", "catch_up", "enabled"}
        )
        values |= {"budgets": budgets, "anchor": now, "next_fire_at": timing.next_after(now)}
        values["paused_reason"] = None if spec.enabled else f"paused by {who.label}"
        self.runs.prepare(start_request(values), who)
        return values | _set_going(who, now)

    async def create(self, spec: ScheduleSpec, who: Principal) -> ScheduleView:
        who.require("schedules.manage")
        now = datetime.now(UTC)
        values = self._definition(spec, who, now) | {
            "schedule_id": f"sch_{uuid.uuid4().hex[:20]}",
            "tenant": who.tenant,
            "pending_tick": None,
            "last_tick_at": None,
            "last_run_id": None,
            "fired": 0,
            "skipped": 0,
            "last_error": None,
            "version": 1,
            "created_by": who.label,
            "created_at": now,
        }
        return view(await self.store.create(values))

    async def list_schedules(self, who: Principal) -> ScheduleList:
        rows = await self.store.listing(who.reach("schedules.read"))
        return ScheduleList(schedules=[view(row) for row in rows])

    async def get(self, schedule_id: str, who: Principal) -> ScheduleView:
        who.require("schedules.read")
        row = await self.store.find(schedule_id)
        who.require("schedules.read", row.tenant)
        return view(row)

    async def replace(
        self, schedule_id: str, spec: ScheduleSpec, who: Principal, expected: int | None
    ) -> ScheduleView:
        now = datetime.now(UTC)

        def decide(row: ScheduleRow) -> dict[str, Any]:
            _may_set_going(who, row)
            return self._definition(spec, who, now) | {"pending_tick": None}

        return await self._change(schedule_id, who, "schedule.changed", decide, expected)

    async def pause(self, schedule_id: str, who: Principal) -> ScheduleView:
        def decide(row: ScheduleRow) -> dict[str, Any]:
            who.require("schedules.manage", row.tenant)
            reason = f"paused by {who.label}"
            return {"enabled": False, "paused_reason": reason, "pending_tick": None}

        return await self._change(schedule_id, who, "schedule.paused", decide, None)

    async def resume(self, schedule_id: str, who: Principal) -> ScheduleView:
        """Set it going again from now (ticks while paused were not missed: they are
        not caught up), as `who`."""
        now = datetime.now(UTC)

        def decide(row: ScheduleRow) -> dict[str, Any]:
            _may_set_going(who, row)
            self.runs.prepare(start_request(row.values), who)
            timing = timing_of(
                cron=row.cron, timezone=row.timezone, interval_s=row.interval_s, anchor=row.anchor
            )
            values: dict[str, Any] = {"enabled": True, "paused_reason": None}
            values |= {"next_fire_at": timing.next_after(now), "pending_tick": None}
            return values | _set_going(who, now)

        return await self._change(schedule_id, who, "schedule.resumed", decide, None)

    async def remove(self, schedule_id: str, who: Principal) -> None:
        def decide(row: ScheduleRow) -> None:
            who.require("schedules.manage", row.tenant)

        await self.store.change(schedule_id, who.label, "schedule.removed", decide, expected=None)

    async def _change(
        self, schedule_id: str, who: Principal, event: str, decide: Any, expected: int | None
    ) -> ScheduleView:
        who.require("schedules.manage")

        def stamped(row: ScheduleRow) -> dict[str, Any]:
            values: dict[str, Any] = decide(row)
            return values | {"changed_by": who.label, "changed_at": datetime.now(UTC)}

        changed = await self.store.change(schedule_id, who.label, event, stamped, expected=expected)
        assert changed is not None
        return view(changed)


def _set_going(who: Principal, now: datetime) -> dict[str, Any]:
    """Whoever sets a schedule going is whom its runs run as."""
    return {
        "run_as": who.name,
        "run_as_token": who.token_id,
        "changed_by": who.label,
        "changed_at": now,
    }


def _may_set_going(who: Principal, row: ScheduleRow) -> None:
    who.require("schedules.manage", row.tenant)  # 404 out of reach
    if who.tenant != row.tenant:
        raise AuthError(
            f"a schedule's runs run as whoever sets it going, in the schedule's tenant "
            f"('{row.tenant}'): only its own principals may change or resume it",
            code=ErrorCode.FORBIDDEN,
        )
