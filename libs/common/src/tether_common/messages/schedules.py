"""Schedules on the wire: `/v1/schedules` (add, list, show, replace, pause, resume, remove).

A schedule starts a run of its tenant's `agent` with its `prompt` and budgets at each
tick of its clock: a `cron` expression read in `timezone` (an IANA name), or every
`interval_s` seconds. `overlap` says what a tick does while the schedule's last run has
not ended (`skip` it, `queue` it until that run ends, or `allow` another run);
`catch_up` what the ticks missed while no brain was running do (`skip` them all, or
`run_once` for all of them). The runs run as `run_as`, the principal that last created,
changed or resumed the schedule, with its rights as they are at each tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from tether_common.messages.base import ID_PATTERN, MAX_BIGINT, WireModel, WireRequest
from tether_common.messages.runs import RunStatus

Overlap = Literal["skip", "queue", "allow"]
CatchUp = Literal["skip", "run_once"]
MAX_PROMPT_CHARS = 200_000  # as a run's prompt (`StartRun`)
MAX_INTERVAL_S = 366 * 86400


class ScheduleSpec(WireRequest):
    """What a schedule is: `POST /v1/schedules` and `PUT /v1/schedules/{id}` (whose
    `version`, or `If-Match`, is the one it replaces)."""

    name: str | None = Field(default=None, max_length=200)
    cron: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="minute hour day month weekday [second], read in `timezone`",
    )
    timezone: str = Field(default="UTC", min_length=1, max_length=64)
    interval_s: int | None = Field(default=None, ge=1, le=MAX_INTERVAL_S)
    agent: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    provider: str | None = Field(default=None, max_length=64)
    model: str | None = Field(default=None, max_length=200)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    # Each run's budget, as a run's (`StartRun`); the agent's defaults fill the rest.
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    max_tool_calls: int | None = Field(default=None, ge=0, le=1000)
    max_cost: float | None = Field(default=None, ge=0, le=1e9)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_BIGINT)
    max_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)
    overlap: Overlap = "skip"
    catch_up: CatchUp = "skip"
    enabled: bool = True
    schedule_version: int | None = Field(
        default=None, ge=1, description="replacing: the version read (409 if it moved on)"
    )


class ScheduleView(WireModel):
    """A schedule as stored, with what it did last."""

    schedule_id: str
    tenant: str
    name: str | None
    cron: str | None
    timezone: str
    interval_s: int | None
    agent: str | None
    provider: str | None
    model: str | None
    prompt: str
    budgets: dict[str, float | int]
    overlap: Overlap
    catch_up: CatchUp
    enabled: bool
    paused_reason: str | None
    run_as: str
    next_fire_at: datetime | None  # None while paused
    pending_tick: datetime | None  # a queued tick waiting for the last run to end
    last_tick_at: datetime | None
    last_run_id: str | None
    last_run_status: RunStatus | None
    fired: int
    skipped: int
    last_error: str | None
    schedule_version: int
    created_by: str
    created_at: datetime
    changed_by: str
    changed_at: datetime


class ScheduleList(WireModel):
    """The schedules within the caller's reach, soonest first."""

    schedules: list[ScheduleView]
