"""Fencing at its two edges: the replica's own clock (`leases.Leases`: when to stop acting)
and the database (`RunStore.commit` and `renew` hold only while the lease is unexpired by
PostgreSQL's clock, so a replica that wakes up past its lease writes nothing)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from runstore import started
from tether_brain.persistence.store import RunStore
from tether_brain.runs.leases import Leases
from tether_brain.runs.tasks import FORGIVEN_STALLS, RunTasks
from tether_brain.state.control import Control
from tether_common.errors import ConflictError
from tether_common.messages.gateway import ChatMessage


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_hold_counts_from_the_send_time_and_ends_before_the_lease() -> None:
    clock = FakeClock()
    leases = Leases(lease_s=10.0, margin=0.2, clock=clock)
    leases.taken("run_a", sent_at=100.0)
    clock.now = 107.9
    assert leases.lapsed() == []
    assert leases.holds("run_a")
    clock.now = 108.0  # 80% of the lease since the create was sent
    assert leases.lapsed() == ["run_a"]
    assert not leases.holds("run_a")


def test_a_late_answer_never_moves_a_hold_back_or_revives_a_dropped_run() -> None:
    clock = FakeClock()
    leases = Leases(lease_s=10.0, margin=0.2, clock=clock)
    leases.taken("run_a", sent_at=105.0)
    leases.renewed(["run_a"], sent_at=101.0)  # a renewal sent before the claim answered late
    clock.now = 112.9
    assert leases.lapsed() == []
    leases.forget("run_a")
    leases.renewed(["run_a"], sent_at=112.0)
    assert not leases.holds("run_a")


async def lapse(engine: AsyncEngine, run_id: str) -> None:
    """The lease runs out in the database; nobody has claimed the run (fence unchanged)."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = :r"
            ),
            {"r": run_id},
        )


async def holder(engine: AsyncEngine, run_id: str) -> str:
    async with engine.connect() as conn:
        owner = await conn.scalar(
            text("SELECT lease_owner FROM runs WHERE run_id = :r"), {"r": run_id}
        )
    return str(owner)


async def test_a_commit_after_the_lease_ran_out_writes_nothing(
    store: RunStore, engine: AsyncEngine
) -> None:
    state = await started(store)
    await lapse(engine, state.run_id)
    state.add_message(ChatMessage(role="assistant", content="too late"))
    with pytest.raises(ConflictError):
        await store.commit(state)
    stored = await store.load(state.run_id)
    assert [m.content for m in stored.messages] == ["first"]
    # Nor can the late replica extend the lease it lost: the run is left for a claim.
    assert await store.leases.renew("replica-a", 60.0, [state.run_id]) == []


async def test_a_held_lease_is_renewed_and_commits(store: RunStore) -> None:
    state = await started(store)
    assert await store.leases.renew("replica-a", 60.0, [state.run_id]) == [state.run_id]
    assert await store.leases.renew("replica-b", 60.0, [state.run_id]) == []
    state.add_message(ChatMessage(role="assistant", content="in time"))
    await store.commit(state)
    assert [m.content for m in (await store.load(state.run_id)).messages] == ["first", "in time"]


async def takeovers(engine: AsyncEngine, run_id: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT takeovers FROM runs WHERE run_id = :r"), {"r": run_id}
        )
        return int(found.scalar_one())


async def test_only_a_claim_that_may_follow_a_crash_counts_as_a_takeover(
    store: RunStore, engine: AsyncEngine
) -> None:
    state = await started(store)
    run_id = state.run_id
    claims: list[tuple[str, list[str], int]] = [
        ("replica-a", [], 0),  # its holder stalled and takes it back: alive, not counted
        ("replica-b", [], 1),  # another replica: its holder may have crashed
        ("replica-b", [run_id], 2),  # a run its holder stalls on too often counts again
        ("replica-b", [], 2),
        ("replica-a", [], 3),
    ]
    held_by = await holder(engine, run_id)
    for owner, stalling, counted in claims:
        await lapse(engine, run_id)
        # Every lapsed run of the session's database is claimed too (the limit leaves none).
        claimed = await store.leases.claim_orphans(owner, 60.0, 100_000, stalling)
        (ours,) = [orphan for orphan in claimed if orphan.run_id == run_id]
        # What the takeover says: who held it, and how long ago its lease ended.
        assert ours.held_by == held_by
        assert ours.lapsed_s is not None
        assert 1.0 <= ours.lapsed_s < 30.0, ours
        held_by = owner
        assert await takeovers(engine, run_id) == counted, (owner, stalling)


async def test_a_run_fenced_here_too_often_is_named_stalling(store: RunStore) -> None:
    clock = FakeClock()
    tasks = RunTasks(store, Leases(lease_s=10.0, margin=0.2, clock=clock), drain_s=1.0)
    state = await started(store)
    done = asyncio.Event()

    async def advance(control: Control) -> None:
        await done.wait()

    for fenced in range(1, FORGIVEN_STALLS + 2):
        tasks.spawn(state, advance, leased_at=clock.now)
        tasks.fence([state.run_id], why="a test")
        assert tasks.stalling() == ([state.run_id] if fenced > FORGIVEN_STALLS else [])
    tasks.spawn(state, advance, leased_at=clock.now)
    done.set()  # the run ends (or parks) here: its stalls are forgotten
    ours = [t for t in asyncio.all_tasks() if t.get_name() == f"run:{state.run_id}"]
    await asyncio.gather(*ours, return_exceptions=True)
    assert tasks.stalling() == []


async def test_a_parked_task_winding_down_keeps_the_resumed_tasks_hold(store: RunStore) -> None:
    """A run parks (its commit gives the lease up) and a decision resumes it in a new
    task before the parked task has returned: the parked task letting go must not take
    the new task's hold with it, or the new task is renewed but never fenced here."""
    clock = FakeClock()
    tasks = RunTasks(store, Leases(lease_s=10.0, margin=0.2, clock=clock), drain_s=1.0)
    state = await started(store)
    resumed, finish = asyncio.Event(), asyncio.Event()

    async def parked(control: Control) -> None:
        await resumed.wait()  # still winding down after its park commit
        tasks.let_go(state.run_id)

    async def running(control: Control) -> None:
        await finish.wait()

    tasks.spawn(state, parked, leased_at=clock.now)
    old = tasks._tasks[state.run_id]
    clock.now += 1.0
    tasks.spawn(state, running, leased_at=clock.now)  # the decision's claim
    resumed.set()
    await old
    assert tasks.leases.holds(state.run_id)
    clock.now += 10.0
    assert tasks.leases.lapsed() == [state.run_id]  # so it is fenced when it runs out
    finish.set()
    await asyncio.gather(tasks._tasks[state.run_id], return_exceptions=True)
    assert not tasks.leases.holds(state.run_id)
