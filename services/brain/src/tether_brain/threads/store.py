"""Threads in PostgreSQL: the `threads` row (whose, which agent, budgets, turn count,
deleted mark) and one `thread_turns` row per turn naming the run that answered it. What a
turn shows (status, answer, usage) is read from its run's row, never copied.

A new turn is written in the transaction that holds the thread's row lock (`turn`): the
turn row, the run's row and the run's carried history commit together, so a turn is
never lost or doubled, and two messages at once are ordered by the lock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import desc, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.tables import journal, runs
from tether_brain.threads.tables import LAST_STATUS, THREAD_COLUMNS, threads, turns
from tether_common.errors import NotFoundError
from tether_common.identity import RowFilter
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.runs import RunStatus, Usage


@dataclass(frozen=True, slots=True)
class ThreadRow:
    thread_id: str
    tenant: str
    owner: str | None
    agent: str | None
    provider: str | None
    model: str | None
    title: str | None
    workspace: str
    budgets: dict[str, Any]
    turns: int
    created_at: datetime
    updated_at: datetime
    recall: int = 0  # memories each turn recalls into its prompt

    @property
    def belongs(self) -> tuple[str, str | None, str | None]:
        """(tenant, owner, agent), what an authorisation check reads."""
        return self.tenant, self.owner, self.agent


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A turn with what its run's row says now."""

    turn: int
    run_id: str
    text: str
    status: RunStatus
    stop_reason: str | None
    answer: str | None
    steps: int
    usage: Usage
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Spent:
    """What a thread's turns have used so far (their runs' counters, children included:
    a parent's usage adds its children's)."""

    steps: int = 0
    tool_calls: int = 0
    tokens: int = 0
    cost: float = 0.0


def _thread(row: Any) -> ThreadRow:
    return ThreadRow(**{c.name: getattr(row, c.name) for c in THREAD_COLUMNS})


def _turn(row: Any) -> TurnRow:
    return TurnRow(
        turn=row.turn,
        run_id=row.run_id,
        text=row.text,
        status=row.status,
        stop_reason=row.stop_reason,
        answer=row.answer,
        steps=row.step,
        usage=Usage(
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost=row.cost,
            estimated=bool(row.usage_estimated),
        ),
        created_at=row.created_at,
    )


class ThreadStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def create(self, values: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(threads.insert().values(values | {"turns": 0, "deleted": False}))

    async def find(self, thread_id: str, conn: AsyncConnection | None = None) -> ThreadRow:
        """A thread that is not deleted (`not_found` otherwise); locked when in `conn`'s
        transaction, so nothing changes it until that commits."""
        query = select(*THREAD_COLUMNS).where(
            threads.c.thread_id == thread_id, threads.c.deleted.is_(False)
        )
        if conn is not None:
            row = (await conn.execute(query.with_for_update())).first()
        else:
            async with self.engine.connect() as own:
                row = (await own.execute(query)).first()
        if row is None:
            raise NotFoundError(f"no thread '{thread_id}'")
        return _thread(row)

    @asynccontextmanager
    async def turn(self, thread_id: str) -> AsyncIterator[tuple[AsyncConnection, ThreadRow]]:
        """A transaction holding the thread's row lock (`not_found` for a deleted one)."""
        async with self.engine.begin() as conn:
            yield conn, await self.find(thread_id, conn)

    async def turns(
        self, thread_id: str, conn: AsyncConnection | None = None, *, last: bool = False
    ) -> list[TurnRow]:
        """The thread's turns in order (only the latest with `last`)."""
        query = (
            select(turns, runs)
            .select_from(turns.join(runs, runs.c.run_id == turns.c.run_id))
            .where(turns.c.thread_id == thread_id)
            .order_by(desc(turns.c.turn) if last else turns.c.turn)
        )
        if last:
            query = query.limit(1)
        if conn is not None:
            return [_turn(row) for row in await conn.execute(query)]
        async with self.engine.connect() as own:
            return [_turn(row) for row in await own.execute(query)]

    async def spent(self, conn: AsyncConnection, thread_id: str) -> Spent:
        row = (
            await conn.execute(
                select(
                    func.coalesce(func.sum(runs.c.step), 0),
                    func.coalesce(func.sum(runs.c.counters["tool_calls"].as_integer()), 0),
                    func.coalesce(func.sum(runs.c.input_tokens + runs.c.output_tokens), 0),
                    func.coalesce(func.sum(runs.c.cost), 0.0),
                )
                .select_from(turns.join(runs, runs.c.run_id == turns.c.run_id))
                .where(turns.c.thread_id == thread_id)
            )
        ).one()
        return Spent(int(row[0]), int(row[1]), int(row[2]), float(row[3]))

    async def chat_grants(self, conn: AsyncConnection, thread_id: str) -> list[str]:
        """Tools allowed "for this chat" in any run of the thread (sub-agents' too)."""
        granted = func.jsonb_array_elements_text(runs.c.counters["chat_grants"])
        rows = await conn.execute(
            select(granted.label("tool"))
            .where(
                runs.c.options["thread_id"].astext == thread_id,
                func.jsonb_typeof(runs.c.counters["chat_grants"]) == "array",
            )
            .distinct()
        )
        return sorted(str(row.tool) for row in rows)

    async def messages(self, conn: AsyncConnection, run_id: str) -> list[ChatMessage]:
        """A run's messages as its journal holds them."""
        rows = await conn.execute(
            select(journal.c.data)
            .where(journal.c.run_id == run_id, journal.c.kind == "message")
            .order_by(journal.c.seq)
        )
        return [ChatMessage.model_validate(row.data) for row in rows]

    async def add_turn(
        self,
        conn: AsyncConnection,
        thread: ThreadRow,
        *,
        run_id: str,
        text: str,
        history: Sequence[ChatMessage],
        now: datetime,
    ) -> int:
        """Record the next turn and its run's carried history (journal rows 1..n, in the
        transaction of `turn`, beside the run's row); returns the turn's number."""
        number = thread.turns + 1
        await conn.execute(
            turns.insert().values(
                thread_id=thread.thread_id, turn=number, run_id=run_id, text=text, created_at=now
            )
        )
        await conn.execute(
            update(threads)
            .where(threads.c.thread_id == thread.thread_id)
            .values(turns=number, updated_at=now)
        )
        if history:
            await conn.execute(
                journal.insert(),
                [
                    {
                        "run_id": run_id,
                        "seq": seq,
                        "kind": "message",
                        "data": message.model_dump(mode="json"),
                        "created_at": now,
                    }
                    for seq, message in enumerate(history, start=1)
                ],
            )
        return number

    async def delete(self, thread_id: str, now: datetime) -> None:
        """Mark the thread deleted (`not_found` if it is not there)."""
        async with self.engine.begin() as conn:
            found = await conn.execute(
                update(threads)
                .where(threads.c.thread_id == thread_id, threads.c.deleted.is_(False))
                .values(deleted=True, updated_at=now)
                .returning(threads.c.thread_id)
            )
            if found.first() is None:
                raise NotFoundError(f"no thread '{thread_id}'")

    async def listing(
        self,
        scope: RowFilter,
        owned_agents: Sequence[str],
        before: datetime | None,
        limit: int,
    ) -> list[tuple[ThreadRow, str | None]]:
        """Threads within `scope`, newest first, each with its latest turn's run status.
        The filter is in the query, so a page is never short for rows out of reach."""
        query = select(*THREAD_COLUMNS, LAST_STATUS.label("last_status")).where(
            threads.c.deleted.is_(False)
        )
        if scope.tenant is not None:
            query = query.where(threads.c.tenant == scope.tenant)
        if scope.owner is not None:
            mine = threads.c.owner == scope.owner
            if owned_agents:
                mine = mine | threads.c.agent.in_(list(owned_agents))
            query = query.where(mine)
        if before is not None:
            query = query.where(threads.c.created_at < before)
        query = query.order_by(desc(threads.c.created_at), desc(threads.c.thread_id))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.limit(limit))).all()
        return [(_thread(row), row.last_status) for row in rows]


__all__ = ["Spent", "ThreadRow", "ThreadStore", "TurnRow"]
