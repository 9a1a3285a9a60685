"""The schedules' tables (migration 0017): `schedules`, one row per schedule, and
`schedule_firings`, one row per run a schedule started, keyed by (schedule, tick)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

schedules = Table(
    "schedules",
    metadata,
    Column("schedule_id", String(64), primary_key=True),
    Column("tenant", String(200), nullable=False),
    Column("name", String(200)),
    Column("cron", String(200)),
    Column("timezone", String(64), nullable=False),
    Column("interval_s", Integer),
    Column("anchor", DateTime(timezone=True), nullable=False),
    Column("agent", String(200)),
    Column("provider", String(64)),
    Column("model", String(200)),
    Column("prompt", Text, nullable=False),
    Column("budgets", JSONB, nullable=False),
    Column("overlap", String(8), nullable=False),
    Column("catch_up", String(8), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("paused_reason", Text),
    # Whose rights each run has: the principal's name, and its token (None: the bootstrap
    # admin of `TETHER_OPERATOR_TOKEN`), looked up again at every tick.
    Column("run_as", String(200), nullable=False),
    Column("run_as_token", String(64)),
    Column("next_fire_at", DateTime(timezone=True), nullable=False),
    Column("pending_tick", DateTime(timezone=True)),
    Column("last_tick_at", DateTime(timezone=True)),
    Column("last_run_id", String(64)),
    Column("fired", Integer, nullable=False),
    Column("skipped", Integer, nullable=False),
    Column("last_error", Text),
    Column("version", Integer, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("changed_by", String(200), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)

firings = Table(
    "schedule_firings",
    metadata,
    Column("schedule_id", String(64), nullable=False),
    Column("tick_at", DateTime(timezone=True), nullable=False),
    Column("run_id", String(64), nullable=False),
    # How many ticks this run stands for (a `run_once` catch-up: all those missed).
    Column("covers", Integer, nullable=False),
    Column("fired_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("schedule_id", "tick_at"),
)
