"""Schedules through the real services: three brain replicas fire each tick exactly once
through a SIGKILL of one of them; catch-up after every brain was down; overlap rules; who
may, and as whom the runs run (a revoked creator's schedule stops); bad input refused."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_client import TetherClient
from tether_client.server.supervisor import Child, Supervisor
from tether_common.errors import TetherError
from tether_common.messages.identity import CreateToken, Role
from tether_common.messages.schedules import ScheduleSpec, ScheduleView
from tether_common.testing import say, until, write_script

pytestmark = pytest.mark.e2e

ADMIN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: the bootstrap admin
GRACE_S = 3.0
ENDED = ("completed", "stopped", "failed")


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_LEASE_S": "1",  # a killed brain's runs are adopted within seconds
        "TETHER_BRAIN_DRAIN_S": "2",
        "TETHER_BRAIN_SCHEDULE_POLL_S": "0.3",
        "TETHER_BRAIN_SCHEDULE_GRACE_S": str(GRACE_S),
    }


@pytest.fixture(scope="module")
async def brains(stack: Supervisor) -> list[Child]:
    """The stack's brain and two more replicas, all serving."""
    more = [stack.add_replica("brain"), stack.add_replica("brain")]
    for child in more:
        await stack.start_child(child)
    await stack.wait_ready(children=more)
    return [stack.child("brain"), *more]


@pytest.fixture
async def client(brains: list[Child]) -> AsyncIterator[TetherClient]:
    async with TetherClient(brains[0].url, token=ADMIN) as found:
        yield found


def quick(scripts_dir: Path) -> str:
    return write_script(scripts_dir, [say("tick done")])


def spec(model: str, **fields: Any) -> ScheduleSpec:
    base: dict[str, Any] = {"prompt": f"scheduled {uuid.uuid4().hex}", "provider": "scripted"}
    return ScheduleSpec.model_validate(base | {"model": model} | fields)


async def firings(engine: AsyncEngine, schedule_id: str) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT f.tick_at, f.run_id, f.covers, r.status, r.created_at, r.updated_at "
                "FROM schedule_firings f LEFT JOIN runs r ON r.run_id = f.run_id "
                "WHERE f.schedule_id = :s ORDER BY f.tick_at"
            ),
            {"s": schedule_id},
        )
        return list(rows)


async def runs_of(engine: AsyncEngine, prompt: str) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT run_id, status FROM runs WHERE prompt = :p"), {"p": prompt}
        )
        return list(rows)


async def schedule_row(engine: AsyncEngine, schedule_id: str) -> Any:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT anchor, next_fire_at, interval_s FROM schedules WHERE schedule_id = :s"),
            {"s": schedule_id},
        )
        return found.one()


async def all_ended(engine: AsyncEngine, schedule_id: str, timeout: float = 60.0) -> list[Any]:
    found: list[Any] = await until(
        lambda: firings(engine, schedule_id),
        done=lambda runs: all(f.status in ENDED for f in runs),
        timeout=timeout,
        every=0.3,
        what=f"every firing of {schedule_id} ended",
    )
    return found


# ---- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"cron": "61 * * * *"}, 422),
        ({"cron": "*/0 * * * *"}, 422),
        ({"cron": "0 0 30 2 *"}, 422),  # never fires
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, 422),
        ({"cron": "0 9 * * *", "timezone": "../../../etc/localtime"}, 422),
        ({"cron": "0 9 * * *", "interval_s": 60}, 422),
        ({}, 422),  # neither cron nor interval
        ({"interval_s": 0}, 422),
        ({"interval_s": -1}, 422),
        ({"interval_s": 5, "prompt": "x" * 200_001}, 422),
        ({"interval_s": 5, "prompt": ""}, 422),
        ({"interval_s": 5, "overlap": "sometimes"}, 422),
        ({"interval_s": 5, "catch_up": "all"}, 422),
        ({"interval_s": 5, "max_steps": 0}, 422),
        ({"interval_s": 5, "prompt": "nul \x00 inside"}, 422),
        ({"interval_s": 5, "agent": "no-such-agent"}, 404),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_stored(
    brains: list[Child], client: TetherClient, fields: dict[str, Any], status: int
) -> None:
    prompt = f"bad {uuid.uuid4().hex}"
    body = {"prompt": prompt, "provider": "scripted", "model": "x"} | fields
    async with httpx.AsyncClient(base_url=brains[0].url, timeout=30) as http:
        answer = await http.post(
            "/v1/schedules", json=body, headers={"Authorization": f"Bearer {ADMIN}"}
        )
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] in ("invalid_request", "not_found")
    listed = (await client.schedules()).schedules
    assert not [s for s in listed if s.prompt == prompt]


# ---- who may, and as whom ----------------------------------------------------------------


async def token(client: TetherClient, name: str, role: Role, tenant: str = "default") -> str:
    made = await client.create_token(CreateToken(name=name, role=role, tenant=tenant))
    return made.token


@pytest.mark.timeout(120)
async def test_a_revoked_creators_schedule_stops_and_others_run_as_themselves(
    brains: list[Child], client: TetherClient, engine: AsyncEngine, scripts_dir: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    alice = await token(client, f"alice{suffix}", "operator")
    bob = await token(client, f"bob{suffix}", "operator")
    viewer = await token(client, f"vera{suffix}", "viewer")
    stranger = await token(client, f"sam{suffix}", "operator", tenant=f"other{suffix}")
    url = brains[1].url
    async with TetherClient(url, token=alice) as as_alice:
        made = await as_alice.add_schedule(spec(quick(scripts_dir), interval_s=1))
    assert made.run_as == f"alice{suffix}"
    sid = made.schedule_id

    async with TetherClient(url, token=viewer) as as_viewer:
        assert (await as_viewer.schedule(sid)).prompt == made.prompt
        assert sid in [s.schedule_id for s in (await as_viewer.schedules()).schedules]
        with pytest.raises(TetherError) as refused:
            await as_viewer.pause_schedule(sid)
        assert refused.value.status == 403
    async with TetherClient(url, token=stranger) as as_stranger:
        with pytest.raises(TetherError) as hidden:
            await as_stranger.schedule(sid)
        assert hidden.value.status == 404
        assert sid not in [s.schedule_id for s in (await as_stranger.schedules()).schedules]
        with pytest.raises(TetherError) as hidden:
            await as_stranger.remove_schedule(sid)
        assert hidden.value.status == 404

    await until(lambda: len_at_least(engine, sid, 1), timeout=20, every=0.2, what="a firing")
    found = await client.list_tokens()
    alice_id = next(t.token_id for t in found.tokens if t.name == f"alice{suffix}")
    await client.revoke_token(alice_id)

    paused = await until(lambda: paused_view(client, sid), timeout=20, every=0.2, what="paused")
    assert paused.paused_reason is not None
    assert f"alice{suffix}" in paused.paused_reason
    fired = len(await firings(engine, sid))
    await asyncio.sleep(2.5)
    assert len(await firings(engine, sid)) == fired, "a revoked creator's schedule fired"

    # Bob resumes it: from now on its runs run as Bob, with Bob's rights.
    async with TetherClient(url, token=bob) as as_bob:
        resumed = await as_bob.resume_schedule(sid)
    assert (resumed.enabled, resumed.run_as) == (True, f"bob{suffix}")
    await until(
        lambda: len_at_least(engine, sid, fired + 1), timeout=20, every=0.2, what="another firing"
    )
    await client.remove_schedule(sid)
    async with engine.connect() as conn:
        trail = await conn.execute(
            text(
                "SELECT event, data FROM audit_records WHERE run_id = 'schedules' "
                "AND (data::jsonb)->>'resource' = :r ORDER BY seq"
            ),
            {"r": f"schedule:{sid}"},
        )
        events = [row.event for row in trail]
    assert events[0] == "schedule.created"
    assert "schedule.paused" in events
    assert events[-2:] == ["schedule.resumed", "schedule.removed"]


async def len_at_least(engine: AsyncEngine, sid: str, count: int) -> bool:
    return len(await firings(engine, sid)) >= count


async def paused_view(client: TetherClient, sid: str) -> ScheduleView | None:
    found = await client.schedule(sid)
    return None if found.enabled else found


# ---- overlap -----------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("overlap", ["skip", "queue", "allow"])
async def test_overlap_while_a_run_goes_on(
    client: TetherClient, engine: AsyncEngine, scripts_dir: Path, overlap: str
) -> None:
    slow = write_script(scripts_dir, [[{"pause_s": 3.0}, {"kind": "chunk", "text": "slow"}]])
    made = await client.add_schedule(spec(slow, interval_s=1, overlap=overlap))
    await asyncio.sleep(5.5)
    view = await client.pause_schedule(made.schedule_id)
    found = await all_ended(engine, made.schedule_id)
    await client.remove_schedule(made.schedule_id)
    assert len(found) >= 2, found
    overlapping = any(b.created_at < a.updated_at for a, b in itertools.pairwise(found))
    if overlap == "allow":
        assert overlapping, "allow started no run while another went on"
        assert view.skipped == 0
        return
    assert not overlapping, f"{overlap} started a run while the last went on"
    assert view.skipped >= 1
    first, second = found[0], found[1]
    # queue: the second run is the very next tick, queued while the first went on (3 s)
    # and started once it ended; skip: the ticks during the first run were dropped.
    assert second.created_at >= first.updated_at
    if overlap == "queue":
        assert second.tick_at == first.tick_at + timedelta(seconds=1)
    else:
        assert second.tick_at >= first.tick_at + timedelta(seconds=3)


# ---- exactly once across replicas, through a kill -----------------------------------------


@pytest.mark.timeout(180)
async def test_each_tick_fires_exactly_once_across_three_brains_through_a_kill(
    brains: list[Child], client: TetherClient, engine: AsyncEngine, scripts_dir: Path
) -> None:
    made = await client.add_schedule(
        spec(quick(scripts_dir), interval_s=1, overlap="allow", catch_up="run_once")
    )
    await asyncio.sleep(4)
    doomed = brains[2]
    assert doomed.proc is not None
    doomed.proc.kill()  # SIGKILL: whatever it had claimed or started is mid-way
    await asyncio.sleep(5)
    view = await client.pause_schedule(made.schedule_id)
    found = await all_ended(engine, made.schedule_id)
    row = await schedule_row(engine, made.schedule_id)
    await client.remove_schedule(made.schedule_id)

    step = timedelta(seconds=row.interval_s)
    consumed = round((row.next_fire_at - row.anchor) / step) - 1  # ticks before the next
    assert consumed >= 8
    # Every tick consumed is in exactly one firing (a run_once firing covers the ticks up
    # to its own), no tick has two, and nothing was skipped.
    covered: list[datetime] = []
    for f in found:
        covered += [f.tick_at - step * k for k in range(f.covers)]
    expected = [row.anchor + step * k for k in range(1, consumed + 1)]
    assert sorted(covered) == expected
    assert view.skipped == 0
    assert {f.status for f in found} == {"completed"}, [(f.run_id, f.status) for f in found]
    # Exactly one run per firing: none started outside the claim.
    runs = await runs_of(engine, made.prompt)
    assert sorted(r.run_id for r in runs) == sorted(f.run_id for f in found)


# ---- catch-up after downtime (last: it stops every brain) ----------------------------------


@pytest.mark.timeout(240)
async def test_catch_up_after_every_brain_was_down(
    stack: Supervisor, brains: list[Child], engine: AsyncEngine, scripts_dir: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=15)
    seconds = ",".join(str((start + timedelta(seconds=i)).second) for i in range(3))
    cron = f"* * * * * {seconds}"  # three ticks, then none until the next minute
    model = quick(scripts_dir)
    async with TetherClient(brains[0].url, token=ADMIN) as client:
        skip = await client.add_schedule(spec(model, cron=cron, catch_up="skip"))
        once = await client.add_schedule(spec(model, cron=cron, catch_up="run_once"))
    assert skip.next_fire_at == start
    live = [c for c in brains if c.proc is not None and c.proc.returncode is None]
    await asyncio.gather(*(stack.stop_child(c) for c in live))
    assert datetime.now(UTC) < start, "the brains took too long to stop; the test proves nothing"

    # Every tick passes, and more than the grace after the last.
    await asyncio.sleep((start - datetime.now(UTC)).total_seconds() + 2 + GRACE_S + 1)
    main = stack.child("brain")
    await stack.start_child(main)
    await stack.wait_ready(children=[main])
    await asyncio.sleep(3)  # several polls

    async with TetherClient(main.url, token=ADMIN) as client:
        skipped = await client.schedule(skip.schedule_id)
        caught = await client.schedule(once.schedule_id)
        found_once = await all_ended(engine, once.schedule_id)
        assert await firings(engine, skip.schedule_id) == []
        assert (skipped.fired, skipped.skipped) == (0, 3)
        assert [(f.covers, f.status) for f in found_once] == [(3, "completed")]
        assert found_once[0].tick_at == start + timedelta(seconds=2)
        assert (caught.fired, caught.skipped) == (1, 0)
        for made in (skip, once):
            await client.remove_schedule(made.schedule_id)
