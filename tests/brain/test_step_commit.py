"""The step commit as one prepared statement on the asyncpg connection
(`persistence.commits`): what it writes, that a refused or failed commit leaves the run's
state as it was, and that a connection killed under it is reported the way SQLAlchemy
reports a database failure and is not given back to the pool."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from runstore import migrated_store, started
from tether_brain.persistence.store import RunStore
from tether_brain.state.events import emit
from tether_brain.state.run import RunState
from tether_common import audit
from tether_common.db import make_engine
from tether_common.errors import ConflictError
from tether_common.messages.events import Step
from tether_common.messages.gateway import ChatMessage


def a_step(state: RunState, text_: str) -> None:
    state.step += 1
    state.add_message(ChatMessage(role="assistant", content=text_))
    emit(state, Step(step=state.step, kind="model", text=text_))
    state.audit_later("step.recorded", {"step": state.step})


async def journal(engine: AsyncEngine, run_id: str) -> list[tuple[int, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT seq, kind FROM run_journal WHERE run_id = :r ORDER BY seq"),
            {"r": run_id},
        )
        return [(r.seq, r.kind) for r in rows]


async def test_steps_commit_their_journal_and_a_trail_that_verifies(
    store: RunStore, engine: AsyncEngine
) -> None:
    state = await started(store, first=None)
    for n in range(3):  # the same statement again and again on pooled connections
        a_step(state, f"step {n}")
        await store.commit(state)
    assert (await journal(engine, state.run_id)) == [
        (seq, kind) for seq, kind in enumerate(["message", "event"] * 3, start=1)
    ]
    assert (state.journal_seq, state.pending, state.audit) == (6, [], [])
    assert await audit.verify(engine, state.run_id, state.audit_head) == []
    loaded = await store.load(state.run_id)
    assert [m.content for m in loaded.messages] == ["step 0", "step 1", "step 2"]
    assert (loaded.journal_seq, loaded.event_seq, loaded.audit_head) == (6, 3, state.audit_head)


async def test_a_refused_commit_writes_nothing_and_leaves_the_state_as_it_was(
    store: RunStore, engine: AsyncEngine
) -> None:
    state = await started(store, first=None)
    a_step(state, "kept")
    await store.commit(state)
    async with engine.begin() as conn:  # another replica claims the run: the fence moves on
        await conn.execute(
            text("UPDATE runs SET fence = fence + 1 WHERE run_id = :r"), {"r": state.run_id}
        )
    a_step(state, "refused")
    head, pending = state.audit_head, list(state.pending)
    with pytest.raises(ConflictError):
        await store.commit(state)
    assert (state.journal_seq, state.audit_head, state.pending) == (2, head, pending)
    assert len(state.audit) == 1
    assert (await journal(engine, state.run_id)) == [(1, "message"), (2, "event")]
    assert await audit.verify(engine, state.run_id, head) == []


async def test_a_connection_killed_under_the_commit_is_a_database_failure_then_replaced(
    engine: AsyncEngine,
) -> None:
    await migrated_store(engine)
    # One pooled connection: the commit after the failure must not get the dead one back.
    single = make_engine(engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        store = RunStore(single)
        state = await started(store, first=None)
        a_step(state, "first")
        await store.commit(state)  # the statement is now prepared on the pooled connection
        async with single.connect() as pooled:
            driver = (await pooled.get_raw_connection()).driver_connection
            assert driver is not None
            pid = driver.get_server_pid()
        async with engine.begin() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        a_step(state, "second")
        with pytest.raises(DBAPIError) as failed:
            await store.commit(state)
        assert failed.value.connection_invalidated
        assert (state.journal_seq, len(state.pending)) == (2, 2)  # nothing moved on
        await store.commit(state)  # a fresh connection: the same step commits now
        assert [m.content for m in (await store.load(state.run_id)).messages] == [
            "first",
            "second",
        ]
    finally:
        await single.dispose()
