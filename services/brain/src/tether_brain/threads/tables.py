"""The threads' tables (migration 0009): `threads`, one row per thread, and
`thread_turns`, one row per turn naming the run that answered it."""

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
    desc,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB

from tether_brain.persistence.tables import runs

metadata = MetaData()

threads = Table(
    "threads",
    metadata,
    Column("thread_id", String(64), primary_key=True),
    Column("tenant", String(200), nullable=False),
    Column("owner", String(200)),
    Column("agent", String(200)),
    Column("provider", String(64)),
    Column("model", String(200)),
    Column("title", Text),
    Column("workspace", String(16), nullable=False),
    Column("budgets", JSONB, nullable=False),
    Column("recall", Integer, nullable=False),  # migration 0018: memories a turn recalls
    Column("turns", Integer, nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

turns = Table(
    "thread_turns",
    metadata,
    Column("thread_id", String(64), nullable=False),
    Column("turn", Integer, nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("thread_id", "turn"),
)


# What a thread row shows (the deleted mark only filters).
THREAD_COLUMNS = [c for c in threads.columns if c.name != "deleted"]
# The status of a thread's latest turn's run (None: no turn yet), for listings.
LAST_STATUS = (
    select(runs.c.status)
    .select_from(turns.join(runs, runs.c.run_id == turns.c.run_id))
    .where(turns.c.thread_id == threads.c.thread_id)
    .order_by(desc(turns.c.turn))
    .limit(1)
    .scalar_subquery()
)
