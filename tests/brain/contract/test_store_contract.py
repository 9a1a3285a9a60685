"""The run store's contract: the same cases against the in-memory store the in-process
tier uses (`tether_brain.testing.MemoryStore`) and the real one on PostgreSQL
(`persistence.store.RunStore`), so the fake cannot drift from what it stands for."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from runstore import migrated_store
from tether_brain.persistence.store import StorePort
from tether_brain.state.events import emit
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_brain.testing import MemoryStore
from tether_common.errors import ConflictError, ErrorCode, NotFoundError
from tether_common.messages.events import Guard
from tether_common.messages.gateway import ChatMessage
from tether_common.messages.runs import StepView


@pytest.fixture
async def postgres_store(engine: AsyncEngine) -> StorePort:
    return await migrated_store(engine)


# PostgreSQL's side asks for the database only when it runs, so it is marked here.
@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.stack)])
def store(request: pytest.FixtureRequest) -> StorePort:
    """Each case against both; only the PostgreSQL one starts the database."""
    if request.param == "memory":
        return MemoryStore()
    found: StorePort = request.getfixturevalue("postgres_store")
    return found


def new_run(**options: object) -> RunState:
    now = datetime.now(UTC)
    return RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        prompt="the prompt",
        provider="scripted",
        model="m",
        limits=Limits(max_steps=5, max_tool_calls=3, max_seconds=9.5),
        created_at=now,
        updated_at=now,
        options=RunOptions.model_validate(options),
        fence=1,
        owner="tester",
    )


async def started(store: StorePort, **options: object) -> RunState:
    state = new_run(**options)
    await store.create(state, owner="replica-a", lease_s=60.0)
    state.status = "running"
    return state


def a_step(state: RunState, text: str) -> None:
    state.step += 1
    state.add_message(ChatMessage(role="assistant", content=text))
    state.add_step(StepView(step=state.step, kind="model", text=text))
    emit(state, Guard(step=state.step, kind="no_answer"))
    state.counters.nudges += 1
    state.audit_later("gate.decision", {"tool": "t"})


async def test_a_created_run_loads_as_made(store: StorePort) -> None:
    state = new_run(guide_only=True, allow_web=False)
    await store.create(state, owner="replica-a", lease_s=60.0)
    loaded = await store.load(state.run_id)
    assert (loaded.status, loaded.fence, loaded.prompt, loaded.model) == (
        "queued",
        1,
        "the prompt",
        "m",
    )
    assert loaded.limits == state.limits
    assert loaded.options == state.options
    assert (loaded.owner, loaded.tenant, loaded.depth) == ("tester", "default", 0)
    assert await store.queries.status(state.run_id) == ("queued", False)


async def test_a_commit_journals_the_step_and_loads_back(store: StorePort) -> None:
    state = await started(store)
    state.add_message(ChatMessage(role="user", content="hi"))
    a_step(state, "hello")
    pending = len(state.pending)
    await store.commit(state)
    assert (state.pending, len(state.published), state.journal_seq) == ([], pending, pending)
    assert state.audit == []
    loaded = await store.load(state.run_id)
    assert [m.content for m in loaded.messages] == ["hi", "hello"]
    assert [s.text for s in loaded.steps] == ["hello"]
    assert (loaded.status, loaded.step, loaded.event_seq) == ("running", 1, 1)
    assert (loaded.journal_seq, loaded.counters.nudges) == (pending, 1)
    assert (loaded.counters.audit_next, loaded.audit_head) == (1, state.audit_head)
    assert loaded.audit_head is not None


async def test_a_stale_fence_commits_nothing(store: StorePort) -> None:
    state = await started(store)
    state.fence = 2  # another replica's claim moved it on; this one still holds 1
    a_step(state, "late")
    with pytest.raises(ConflictError):
        await store.commit(state)
    assert len(state.pending) == 3  # nothing applied
    assert (await store.load(state.run_id)).messages == []


async def test_concurrent_commits_commit_every_run_but_the_one_fenced_out(
    store: StorePort,
) -> None:
    """Steps of many runs committing at once (grouped into one transaction on
    PostgreSQL): a run fenced out is refused alone, and nothing of its step is applied."""
    states = [await started(store) for _ in range(8)]
    for n, state in enumerate(states):
        a_step(state, f"step of run {n}")
    fenced = states[3]
    fenced.fence = 2  # another replica has claimed it
    results = await asyncio.gather(*(store.commit(s) for s in states), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["NoneType"] * 3 + ["ConflictError"] + [
        "NoneType"
    ] * 4
    assert (len(fenced.pending), fenced.journal_seq) == (3, 0)  # nothing applied
    assert (await store.load(fenced.run_id)).messages == []
    for n, state in enumerate(states):
        if state is not fenced:
            assert (state.pending, state.journal_seq) == ([], 3)
            loaded = await store.load(state.run_id)
            assert [m.content for m in loaded.messages] == [f"step of run {n}"]
            assert (loaded.step, loaded.audit_head) == (1, state.audit_head)


async def test_an_ended_run_gives_its_lease_up(store: StorePort) -> None:
    state = await started(store)
    state.status, state.answer = "completed", "done"
    await store.commit(state)
    assert await store.queries.status(state.run_id) == ("completed", False)
    a_step(state, "after the end")
    with pytest.raises(ConflictError):
        await store.commit(state)


async def test_queued_messages_are_handed_back_once_instead_of_an_end(store: StorePort) -> None:
    state = await started(store)
    assert await store.queue_message(state.run_id, "one more") == "queued"  # not yet committed
    ended: list[bool] = []
    assert await store.finish_unless_queued(state, lambda: ended.append(True)) == ["one more"]
    assert ended == []
    state.status = "completed"
    assert await store.finish_unless_queued(state, lambda: ended.append(True)) == []
    assert ended == [True]
    assert (await store.queries.status(state.run_id))[0] == "completed"


async def test_a_message_for_an_ended_or_unknown_run_is_refused(store: StorePort) -> None:
    state = await started(store)
    state.status = "stopped"
    await store.commit(state)
    with pytest.raises(ConflictError) as ended:
        await store.queue_message(state.run_id, "too late")
    assert ended.value.code == ErrorCode.RUN_ENDED
    with pytest.raises(NotFoundError):
        await store.queue_message("run_nobody", "hello?")
    with pytest.raises(NotFoundError):
        await store.load("run_nobody")


async def test_a_stop_request_is_durable(store: StorePort) -> None:
    state = await started(store)
    assert await store.request_stop(state.run_id) == "queued"
    assert await store.queries.status(state.run_id) == ("queued", True)
    assert (await store.load(state.run_id)).stop_requested
    with pytest.raises(NotFoundError):
        await store.request_stop("run_nobody")
