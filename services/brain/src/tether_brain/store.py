"""Durable runs in PostgreSQL: the run row (status and counters) and the append-only
journal. A step becomes durable when its one commit returns; the commit is fenced, so a
replica that lost the run cannot write after it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.state import RunState
from tether_common.errors import ConflictError, NotFoundError
from tether_common.messages.runs import Usage

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("status", String(32), nullable=False, index=True),
    Column("stop_reason", Text),
    Column("prompt", Text, nullable=False),
    Column("answer", Text),
    Column("provider", String(64), nullable=False),
    Column("model", String(200)),
    Column("max_steps", Integer, nullable=False),
    Column("step", Integer, nullable=False),
    Column("journal_seq", BigInteger, nullable=False),
    Column("event_seq", BigInteger, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost", Float, nullable=False),
    Column("usage_estimated", Integer, nullable=False),
    Column("options", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

journal = Table(
    "run_journal",
    metadata,
    Column("run_id", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("data", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
)


def _row_values(state: RunState) -> dict[str, Any]:
    return {
        "status": state.status,
        "stop_reason": state.stop_reason,
        "answer": state.answer,
        "step": state.step,
        "journal_seq": state.journal_seq,
        "event_seq": state.event_seq,
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "cost": state.usage.cost,
        "usage_estimated": int(state.usage.estimated),
        "updated_at": state.updated_at,
    }


class RunStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def create(self, state: RunState) -> None:
        values = _row_values(state) | {
            "run_id": state.run_id,
            "prompt": state.prompt,
            "provider": state.provider,
            "model": state.model,
            "max_steps": state.max_steps,
            "fence": state.fence,
            "options": state.options,
            "created_at": state.created_at,
        }
        async with self.engine.begin() as conn:
            await conn.execute(runs.insert().values(values))

    async def commit(self, state: RunState) -> None:
        """Append the step's pending entries and the new counters in one fenced commit."""
        now = datetime.now(UTC)
        rows = []
        for entry in state.pending:
            state.journal_seq += 1
            rows.append(
                {
                    "run_id": state.run_id,
                    "seq": state.journal_seq,
                    "kind": entry.kind,
                    "data": entry.data,
                    "created_at": now,
                }
            )
        state.updated_at = now
        async with self.engine.begin() as conn:
            if rows:
                await conn.execute(journal.insert(), rows)
            result = await conn.execute(
                update(runs)
                .where(runs.c.run_id == state.run_id, runs.c.fence == state.fence)
                .values(_row_values(state))
            )
            if result.rowcount != 1:
                raise ConflictError(f"run {state.run_id} is no longer ours (fence {state.fence})")
        state.pending.clear()

    async def load(self, run_id: str) -> RunState:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).first()
            if row is None:
                raise NotFoundError(f"no run '{run_id}'")
            entries = await conn.execute(
                select(journal.c.kind, journal.c.data)
                .where(journal.c.run_id == run_id, journal.c.kind != "event")
                .order_by(journal.c.seq)
            )
            state = RunState(
                run_id=row.run_id,
                prompt=row.prompt,
                provider=row.provider,
                model=row.model,
                max_steps=row.max_steps,
                created_at=row.created_at,
                updated_at=row.updated_at,
                status=row.status,
                stop_reason=row.stop_reason,
                answer=row.answer,
                step=row.step,
                journal_seq=row.journal_seq,
                event_seq=row.event_seq,
                fence=row.fence,
                options=row.options,
                usage=Usage(
                    input_tokens=row.input_tokens,
                    output_tokens=row.output_tokens,
                    cost=row.cost,
                    estimated=bool(row.usage_estimated),
                ),
            )
            for kind, data in entries:
                state.replay(kind, data)
        return state

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """A run's stored events with `seq` above `after`, oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(journal.c.data)
                .where(journal.c.run_id == run_id, journal.c.kind == "event")
                .order_by(journal.c.seq)
            )
            return [data for (data,) in rows if int(data["seq"]) > after]
