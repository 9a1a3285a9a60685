"""The step commit as one prepared statement on the asyncpg connection
(`persistence.commits`): what it writes, that a refused or failed commit leaves the run's
state as it was, and that a connection killed under it is reported the way SQLAlchemy
reports a database failure and is not given back to the pool. Group commit
(`persistence.grouped`): runs committing together share one transaction, each fenced on
its own; a statement failing or a connection (or the brain) lost mid-flush acknowledges
nothing that is not committed."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE
from typing import Any

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
from tether_common.testing import until


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


async def xmins(engine: AsyncEngine, run_ids: list[str]) -> set[str]:
    """The transactions that last wrote these run rows."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT xmin::text AS x FROM runs WHERE run_id = ANY(:r)"), {"r": run_ids}
        )
        return {r.x for r in rows}


async def test_steps_of_runs_committing_together_share_one_transaction_each_fenced(
    store: RunStore, engine: AsyncEngine
) -> None:
    states = [await started(store, first=None) for _ in range(10)]
    for state in states:
        a_step(state, "together")
    fenced = states[4]
    async with engine.begin() as conn:  # another replica claims one of them
        await conn.execute(
            text("UPDATE runs SET fence = fence + 1 WHERE run_id = :r"), {"r": fenced.run_id}
        )
    results = await asyncio.gather(*(store.commit(s) for s in states), return_exceptions=True)
    assert [isinstance(r, ConflictError) for r in results] == [n == 4 for n in range(10)]
    ours = [s.run_id for s in states if s is not fenced]
    assert len(await xmins(engine, ours)) == 1  # one transaction (one flush) for nine runs
    for state in states:
        expected = [] if state is fenced else [(1, "message"), (2, "event")]
        assert await journal(engine, state.run_id) == expected
    assert (fenced.journal_seq, len(fenced.pending)) == (0, 2)


async def test_a_statement_failing_in_a_group_fails_alone(
    store: RunStore, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    states = [await started(store, first=None) for _ in range(5)]
    for state in states:
        a_step(state, "grouped")
    broken = states[2]
    async with engine.begin() as conn:  # its step's first journal entry exists already
        await conn.execute(
            text(
                "INSERT INTO run_journal (run_id, seq, kind, data, created_at) "
                "VALUES (:r, 1, 'message', '{}', now())"
            ),
            {"r": broken.run_id},
        )
    results = await asyncio.gather(*(store.commit(s) for s in states), return_exceptions=True)
    assert [isinstance(r, DBAPIError) for r in results] == [n == 2 for n in range(5)]
    assert "each again alone" in caplog.text  # the group failed as one, then each alone
    assert (broken.journal_seq, len(broken.pending)) == (0, 2)
    for state in states:
        if state is not broken:
            assert await journal(engine, state.run_id) == [(1, "message"), (2, "event")]


async def lock_waiter(engine: AsyncEngine) -> int:
    """The backend of this database waiting for a row lock (the blocked flush)."""
    query = text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )

    async def waiting() -> Any:
        async with engine.connect() as conn:
            return await conn.scalar(query)

    pid = await until(waiting, timeout=30, every=0.02, what="a backend waiting for a lock")
    return int(pid)


async def test_a_flush_cut_off_midway_acknowledges_none_and_commits_none(
    store: RunStore, engine: AsyncEngine
) -> None:
    """The flush's connection dies after some of its statements ran (the last run's row
    is locked, so the flush stops there): every step of it fails, none is committed
    (one transaction), and each commits once the database answers again."""
    states = sorted([await started(store, first=None) for _ in range(5)], key=lambda s: s.run_id)
    for state in states:
        a_step(state, "cut off")
    async with engine.connect() as blocker:
        await blocker.execute(
            text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": states[-1].run_id}
        )
        commits = asyncio.gather(*(store.commit(s) for s in states), return_exceptions=True)
        flusher = await lock_waiter(engine)
        async with engine.begin() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": flusher})
        results = await commits
        await blocker.rollback()
    assert all(isinstance(r, DBAPIError) for r in results), results
    for state in states:
        assert await journal(engine, state.run_id) == []
        assert (state.journal_seq, len(state.pending)) == (0, 2)  # nothing acknowledged
    await asyncio.gather(*(store.commit(s) for s in states))
    for state in states:
        assert await journal(engine, state.run_id) == [(1, "message"), (2, "event")]


# A brain that commits two rounds of steps of the runs named on its command line, each
# round when told to, and says which steps were acknowledged.
BRAIN = """
import asyncio, sys
from tether_brain.persistence.store import RunStore
from tether_common.db import make_engine
from tether_common.messages.gateway import ChatMessage

async def main(url, run_ids):
    store = RunStore(make_engine(url, pool_size=2))
    states = [await store.load(r) for r in run_ids]
    for text in ("one", "two"):
        sys.stdin.readline()
        for state in states:
            state.step += 1
            state.add_message(ChatMessage(role="assistant", content=text))

        async def commit(state):
            await store.commit(state)
            print("acked", text, state.run_id, flush=True)

        await asyncio.gather(*(commit(s) for s in states))

asyncio.run(main(sys.argv[1], sys.argv[2:]))
"""


async def test_a_brain_killed_mid_flush_loses_no_acknowledged_step(
    store: RunStore, engine: AsyncEngine
) -> None:
    """Round one is acknowledged; round two's flush is blocked on the last run's row when
    the brain is killed. Every acknowledged step is there, none of round two was
    acknowledged, and round two is in the database for every run or for none."""
    states = sorted([await started(store, first=None) for _ in range(5)], key=lambda s: s.run_id)
    run_ids = [s.run_id for s in states]
    url = engine.url.render_as_string(hide_password=False)
    brain = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BRAIN, url, *run_ids, stdin=PIPE, stdout=PIPE
    )
    assert brain.stdin is not None
    assert brain.stdout is not None
    try:
        brain.stdin.write(b"go\n")
        acked = [(await brain.stdout.readline()).decode().split() for _ in run_ids]
        assert sorted(acked) == [["acked", "one", r] for r in run_ids]
        async with engine.connect() as blocker:
            await blocker.execute(
                text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_ids[-1]}
            )
            brain.stdin.write(b"go\n")
            flusher = await lock_waiter(engine)
            brain.kill()
            await brain.wait()
            assert await brain.stdout.read() == b""  # nothing of round two acknowledged
            await blocker.rollback()
    finally:
        if brain.returncode is None:
            brain.kill()
            await brain.wait()
    await backend_gone(engine, flusher)  # it finishes what it was sent, then notices
    rounds = {tuple(await contents(store, r)) for r in run_ids}
    assert rounds in ({("one",)}, {("one", "two")}), rounds


async def backend_gone(engine: AsyncEngine, pid: int) -> None:
    async def backends() -> Any:
        async with engine.connect() as conn:
            query = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p")
            return await conn.scalar(query, {"p": pid})

    await until(
        backends, done=lambda found: not found, timeout=30, every=0.02, what=f"backend {pid} gone"
    )


async def contents(store: RunStore, run_id: str) -> list[str]:
    return [str(m.content) for m in (await store.load(run_id)).messages]
