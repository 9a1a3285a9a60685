"""The kill switch's matching, without services: which runs a kill covers, in memory
(`Kill.covers`, what starts and the runs advancing here are checked against) and in SQL
(`persistence.kills.in_scope`, how parked runs are found), held to the same answers over
a table of runs and kills; the `killed` refusal; a control's stop reason; and the task
group telling exactly the runs in scope to stop."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from tether_brain.persistence.kills import KillStore
from tether_brain.persistence.store import RunStore
from tether_brain.persistence.tables import runs
from tether_brain.runs.leases import Leases
from tether_brain.runs.tasks import Advance, RunTasks
from tether_brain.state.control import STOP_REQUESTED, Control
from tether_brain.state.kills import KILLED, Kill, Kills, RunScope
from tether_brain.state.options import RunOptions
from tether_brain.state.run import Limits, RunState
from tether_common.errors import CODES, ConflictError, ErrorCode
from tether_common.messages.kills import KillScope

WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def kill(scope: KillScope, tenant: str | None = None, agent: str | None = None) -> Kill:
    return Kill(1, scope, tenant, agent, "runaway spend", "token:ops", WHEN)


def run_state(tenant: str, agent: str | None = None, agent_tenant: str | None = None) -> RunState:
    now = datetime.now(UTC)
    return RunState(
        run_id=f"run_{uuid.uuid4().hex}",
        prompt="p",
        provider="scripted",
        model=None,
        limits=Limits(max_steps=3),
        created_at=now,
        updated_at=now,
        options=RunOptions(agent=agent, agent_tenant=agent_tenant),
        fence=1,
        tenant=tenant,
    )


# (name, tenant, agent, agent's tenant): runs of two tenants, their own agents, a shared
# agent of `a` used by `b`, the default agent, and a run stored before agents had tenants.
RUNS = [
    ("a default", "a", None, "default"),
    ("a own bot", "a", "bot", "a"),
    ("a other agent", "a", "helper", "a"),
    ("b own bot", "b", "bot", "b"),
    ("b uses a's bot", "b", "bot", "a"),
    ("b old run, no agent tenant", "b", "bot", None),
]
# (kill, the runs it covers)
KILLS = [
    (kill("all"), {name for name, *_ in RUNS}),
    (kill("tenant", "a"), {"a default", "a own bot", "a other agent"}),
    (kill("tenant", "b"), {"b own bot", "b uses a's bot", "b old run, no agent tenant"}),
    (kill("tenant", "c"), set()),
    (kill("agent", "a", "bot"), {"a own bot", "b uses a's bot"}),
    (kill("agent", "b", "bot"), {"b own bot", "b old run, no agent tenant"}),
    (kill("agent", "default", "default"), {"a default"}),
    (kill("agent", "a", "nobody"), set()),
]


def unique(tenant: str, tag: str) -> str:
    """A tenant of this test's own (the database is shared); the built-in agent's stays."""
    return tenant if tenant == "default" else f"{tenant}-{tag}"


def tagged_kill(found: Kill, tag: str) -> Kill:
    tenant = None if found.tenant is None else unique(found.tenant, tag)
    return Kill(
        found.kill_id, found.scope, tenant, found.agent, found.reason, found.killed_by, WHEN
    )


# Ids from sorted names: a set's order differs between processes (xdist's workers must
# collect the same ids).
@pytest.mark.parametrize(
    ("found", "covered"),
    KILLS,
    ids=lambda v: ",".join(sorted(v))[:40] if isinstance(v, set) else str(v)[:40],
)
def test_a_kill_covers_exactly_its_runs_in_memory(found: Kill, covered: set[str]) -> None:
    for name, tenant, agent, agent_tenant in RUNS:
        scope = RunScope.of(run_state(tenant, agent, agent_tenant))
        assert found.covers(scope) is (name in covered), (name, scope)


async def test_the_sql_of_a_kill_covers_what_memory_covers(store: RunStore) -> None:
    """Parked runs (no task holds them) are found by SQL: for every kill of the table,
    and for all of them at once, the same runs as `Kill.covers` (tenants made unique)."""
    tag = uuid.uuid4().hex[:8]
    made: dict[str, RunState] = {}
    for name, tenant, agent, agent_tenant in RUNS:
        state = run_state(unique(tenant, tag), agent, agent_tenant and unique(agent_tenant, tag))
        await store.create(state, owner="replica-a", lease_s=60.0)
        async with store.engine.begin() as conn:
            await conn.execute(
                update(runs).where(runs.c.run_id == state.run_id).values(status="awaiting_approval")
            )
        made[name] = state
    kills = KillStore(store.engine)
    ours = {s.run_id: name for name, s in made.items()}
    tagged = [tagged_kill(k, tag) for k, _ in KILLS]
    for found, (_, covered) in zip(tagged, KILLS, strict=True):
        if found.scope == "all":
            continue  # every parked run of the shared database: checked through memory below
        in_sql = {ours[r] for r in await kills.parked_in_scope([found], 100_000) if r in ours}
        in_memory = {n for n, s in made.items() if found.covers(RunScope.of(s))}
        assert in_sql == in_memory == covered, found
    several = [k for k in tagged if k.scope != "all"]
    in_sql = {ours[r] for r in await kills.parked_in_scope(several, 100_000) if r in ours}
    assert in_sql == {n for n, s in made.items() if any(k.covers(RunScope.of(s)) for k in several)}
    everything = {r for r in await kills.parked_in_scope([kill("all")], 100_000) if r in ours}
    assert everything == set(ours)


def test_the_refusal_says_who_killed_what_when_and_how_to_lift() -> None:
    registry = Kills()
    registry.replace([kill("agent", "a", "bot")])
    registry.refuse(RunScope("a", "a", "helper"))  # another agent: no refusal
    with pytest.raises(ConflictError) as refused:
        registry.refuse(RunScope("b", "a", "bot"))
    error = refused.value
    assert error.code == ErrorCode.KILLED
    assert CODES[ErrorCode.KILLED].status == 409
    assert not error.retryable
    for part in ("agent 'bot' of tenant 'a'", "token:ops", "2030-01-02T03:04:05", "runaway spend"):
        assert part in error.message
    assert "tether kill --lift --agent bot --tenant a" in error.message


def test_a_control_stops_with_the_first_reason_given() -> None:
    control = Control()
    before = control.stop_reason
    control.halt(KILLED)
    control.halt(STOP_REQUESTED)
    assert (before, control.stop_reason) == (None, KILLED)
    other = Control()
    other.halt()
    other.halt(KILLED)
    assert other.stop_reason == STOP_REQUESTED


async def test_the_task_group_tells_only_the_runs_in_scope(store: RunStore) -> None:
    tasks = RunTasks(store, Leases(60.0, 0.2), drain_s=1.0)
    stopped: dict[str, str | None] = {}

    def advancing(run_id: str) -> Advance:
        async def work(control: Control) -> None:
            await control.stop.wait()
            stopped[run_id] = control.stop_reason

        return work

    states = [
        run_state("a", "bot", "a"),
        run_state("a", None, "default"),
        run_state("b", "bot", "b"),
    ]
    for state in states:
        tasks.spawn(state, advancing(state.run_id), leased_at=tasks.leases.clock())
    registry = Kills()
    registry.replace([kill("agent", "a", "bot"), kill("tenant", "b")])
    told = tasks.halt(registry.covers, KILLED)
    assert sorted(told) == sorted([states[0].run_id, states[2].run_id])
    assert tasks.halt(registry.covers, KILLED) == []  # told once
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stopped == {states[0].run_id: KILLED, states[2].run_id: KILLED}
    tasks.control(states[1].run_id).halt()  # type: ignore[union-attr]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stopped[states[1].run_id] == STOP_REQUESTED
