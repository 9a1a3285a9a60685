"""The kill switch through the real services (issue 31): `POST /v1/kill --all` stops 100
running runs within one lease, and new runs are refused `killed` until it is lifted,
also after the brain is SIGKILLed and started again; a tenant's kill leaves another
tenant's runs running and reaches parked runs (their approvals withdrawn), thread turns
and the OpenAI face; an agent's kill only that agent's runs; a kill the brain never heard
of (a lost notice) is read with its lease sweep; only admins set and lift kills, every
change is in the `policy` audit trail and the trail verifies. A killed run's model
turn is cut at the gateway too, and a brain stopping with a turn in flight leaves the
gateway nothing to wait for (issue 30: it used to generate on for nobody, and stop 10 s
late).

One stack with a short lease (`TETHER_BRAIN_LEASE_S`), so "within one lease" is seconds;
runs stay running on a scripted model turn that waits. Kills are lifted after each test
(the database, and so the kills, are shared by every stack of the session)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.base import decode
from tether_common.messages.gateway import GenerateRequest
from tether_common.testing import call, say, until, write_script

pytestmark = pytest.mark.e2e

ADMIN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: the bootstrap admin
LEASE_S = 6.0
CONFIRMED_TOOL = "convert_time"  # an organisation `confirm`: a call of it parks its run
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
WAITING = [[{"pause_s": 120}, *say("never said: the run is stopped first")]]
ROLES = ("operator", "approver", "viewer", "owner", "client")


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_LEASE_S": str(LEASE_S),
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED_TOOL: "confirm"}),
    }


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class World:
    """The stack as the tests use it: HTTP to the brain, tokens of two tenants, the
    database the services write."""

    def __init__(self, http: httpx.AsyncClient, engine: AsyncEngine, scripts: Path) -> None:
        self.http = http
        self.engine = engine
        self.scripts = scripts
        self.tag = uuid.uuid4().hex[:6]
        self.tenant_a, self.tenant_b = f"ka-{self.tag}", f"kb-{self.tag}"
        self.tokens: dict[str, str] = {}

    async def token(self, name: str, role: str, tenant: str) -> str:
        body = {"name": f"{name}-{self.tag}", "role": role, "tenant": tenant}
        made = await self.http.post("/v1/tokens", json=body, headers=bearer(ADMIN))
        assert made.status_code == 201, made.text
        self.tokens[name] = str(made.json()["token"])
        return self.tokens[name]

    async def start(self, token: str, turns: list[Any] = WAITING, **options: Any) -> str:
        model = write_script(self.scripts, turns)
        body = {"prompt": "work", "provider": "scripted", "model": model} | options
        started = await self.http.post("/v1/runs", json=body, headers=bearer(token))
        assert started.status_code == 201, started.text
        return str(started.json()["run_id"])

    async def refused(self, token: str, **options: Any) -> dict[str, Any]:
        model = write_script(self.scripts, WAITING)
        body = {"prompt": "work", "provider": "scripted", "model": model} | options
        answer = await self.http.post("/v1/runs", json=body, headers=bearer(token))
        assert answer.status_code == 409, answer.text
        error: dict[str, Any] = answer.json()["error"]
        assert error["code"] == "killed", error
        return error

    async def statuses(self, run_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT run_id, status, stop_reason FROM runs WHERE run_id = ANY(:ids)"),
                {"ids": run_ids},
            )
            return {r.run_id: (r.status, r.stop_reason) for r in rows}

    async def all_in(self, run_ids: list[str], *wanted: tuple[str, str | None]) -> bool:
        found = await self.statuses(run_ids)
        return len(found) == len(run_ids) and all(s in wanted for s in found.values())

    async def kill(self, body: dict[str, Any], token: str = ADMIN) -> httpx.Response:
        return await self.http.post("/v1/kill", json=body, headers=bearer(token))

    async def lift(self, body: dict[str, Any], token: str = ADMIN) -> httpx.Response:
        return await self.http.post("/v1/kill/lift", json=body, headers=bearer(token))

    async def stop(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            await self.http.post(f"/v1/runs/{run_id}/stop", headers=bearer(ADMIN))


RUNNING = ("running", None)
KILLED = ("stopped", "killed")


@pytest.fixture(scope="module")
async def world(stack: Supervisor, engine: AsyncEngine, scripts_dir: Path) -> AsyncIterator[World]:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=60) as http:
        found = World(http, engine, scripts_dir)
        await found.token("op-a", "operator", found.tenant_a)
        await found.token("op-b", "operator", found.tenant_b)
        for role in ROLES:
            await found.token(role, role, found.tenant_a)
        yield found


@pytest.fixture(autouse=True)
async def lifted(stack: Supervisor, engine: AsyncEngine, world: World) -> AsyncIterator[None]:
    """No kill outlives its test: lifted in the table, and each tenant a test may have
    killed can start again (a replica learns of a lift behind its back at its sweep)."""
    yield
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE kills SET lifted_at = now(), lifted_by = 'test cleanup' "
                "WHERE lifted_at IS NULL"
            )
        )
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=10) as http:
        # The brain hears of it with its next sweep at the latest; a start says when.
        async def starts() -> bool:
            for token in (ADMIN, world.tokens["op-a"], world.tokens["op-b"]):
                answer = await http.post("/v1/runs", json={"prompt": "hi"}, headers=bearer(token))
                if answer.status_code != 201:
                    return False
            return True

        await until(
            starts, timeout=LEASE_S, what="the brain forgets the kills lifted behind its back"
        )


@pytest.mark.timeout(300)
async def test_a_kill_of_all_stops_100_running_runs_within_a_lease_and_outlives_the_brain(
    world: World, stack: Supervisor
) -> None:
    run_ids = list(await asyncio.gather(*(world.start(ADMIN) for _ in range(100))))
    await until(lambda: world.all_in(run_ids, RUNNING), timeout=120, what="100 runs running")

    made = await world.kill({"scope": "all", "reason": "incident 42"})
    assert made.status_code == 201, made.text
    # Timed from the kill's answer: the one lease the issue allows (`until` fails after it).
    await until(lambda: world.all_in(run_ids, KILLED), timeout=LEASE_S, what="100 runs killed")
    error = await world.refused(ADMIN)
    for part in ("all runs are killed", "operator", "incident 42", "tether kill --lift --all"):
        assert part in error["message"], error
    again = await world.kill({"scope": "all", "reason": "once more"})
    assert (again.status_code, again.json()["kill_id"]) == (200, made.json()["kill_id"])

    brain = stack.child("brain")
    stack.kill("brain")
    assert brain.proc is not None
    await brain.proc.wait()
    await stack.start_child(brain)
    await stack.wait_ready(timeout=120, children=[brain])
    await world.refused(ADMIN)  # read back from the database by the new brain
    await world.refused(world.tokens["op-b"])

    lifted = await world.lift({"scope": "all", "reason": "resolved"})
    assert lifted.status_code == 200, lifted.text
    assert lifted.json()["lifted_by"] == "operator"
    back = await world.start(ADMIN, [say("back")])
    await until(
        lambda: world.all_in([back], ("completed", None)), timeout=60, what="a run after the lift"
    )
    assert (await world.lift({"scope": "all"})).status_code == 404

    record = (await world.http.get("/v1/kill?lifted=true", headers=bearer(ADMIN))).json()
    mine = [k for k in record["kills"] if k["kill_id"] == made.json()["kill_id"]]
    assert [(k["reason"], k["lift_reason"]) for k in mine] == [("incident 42", "resolved")]
    report = (await world.http.get("/v1/audit/policy", headers=bearer(ADMIN))).json()
    assert report["intact"] is True, report
    async with world.engine.connect() as conn:
        events = (
            await conn.execute(
                text(
                    "SELECT event, data FROM audit_records WHERE run_id = 'policy' "
                    "AND event LIKE 'kill.%' ORDER BY seq DESC LIMIT 2"
                )
            )
        ).all()
    assert [(e, json.loads(d)["resource"]) for e, d in reversed(events)] == [
        ("kill.set", "kill:all"),
        ("kill.lifted", "kill:all"),
    ]


async def test_a_tenants_kill_leaves_other_tenants_running(world: World) -> None:
    op_a, op_b = world.tokens["op-a"], world.tokens["op-b"]
    a_runs = [await world.start(op_a) for _ in range(2)]
    b_runs = [await world.start(op_b) for _ in range(2)]
    model = write_script(world.scripts, [say("thread answer")])
    thread = await world.http.post(
        "/v1/threads", json={"provider": "scripted", "model": model}, headers=bearer(op_a)
    )
    assert thread.status_code == 201, thread.text
    await until(
        lambda: world.all_in(a_runs + b_runs, RUNNING), timeout=60, what="runs of two tenants"
    )

    made = await world.kill({"scope": "tenant", "tenant": world.tenant_a})
    assert made.status_code == 201, made.text
    await until(
        lambda: world.all_in(a_runs, KILLED), timeout=LEASE_S, what="tenant a's runs killed"
    )
    await asyncio.sleep(LEASE_S / 2)  # past a sweep: nothing else is stopped by it
    assert await world.all_in(b_runs, RUNNING)

    await world.refused(op_a)
    other = await world.start(op_b)
    turn = await world.http.post(
        f"/v1/threads/{thread.json()['thread_id']}/messages",
        json={"text": "hello"},
        headers=bearer(op_a),
    )
    assert (turn.status_code, turn.json()["error"]["code"]) == (409, "killed"), turn.text
    face = await world.http.post(
        "/v1/chat/completions",
        json={"model": "default", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(op_a),
    )
    assert face.status_code == 409, face.text
    assert face.json()["error"] | {"message": ""} == {
        "code": "killed",
        "type": "conflict_error",
        "message": "",
        "param": None,
    }
    seen_a = (await world.http.get("/v1/kill", headers=bearer(op_a))).json()["kills"]
    seen_b = (await world.http.get("/v1/kill", headers=bearer(op_b))).json()["kills"]
    assert [k["kill_id"] for k in seen_a] == [made.json()["kill_id"]]
    assert seen_b == []

    assert (await world.lift({"scope": "tenant", "tenant": world.tenant_a})).status_code == 200
    await world.stop([*b_runs, other, await world.start(op_a)])


async def test_an_agents_kill_stops_only_that_agents_runs(world: World) -> None:
    op_a = world.tokens["op-a"]
    agent = f"kbot-{world.tag}"
    made = await world.http.post(
        "/v1/agents", json={"id": agent, "tenant": world.tenant_a}, headers=bearer(ADMIN)
    )
    assert made.status_code == 201, made.text
    bot_run = await world.start(op_a, agent=agent)
    plain_run = await world.start(op_a)
    await until(
        lambda: world.all_in([bot_run, plain_run], RUNNING), timeout=60, what="two agents' runs"
    )

    missing = await world.kill({"scope": "agent", "agent": "nobody", "tenant": world.tenant_a})
    assert missing.status_code == 404, missing.text
    killed = await world.kill({"scope": "agent", "agent": agent, "tenant": world.tenant_a})
    assert killed.status_code == 201, killed.text
    await until(
        lambda: world.all_in([bot_run], KILLED), timeout=LEASE_S, what="the agent's run killed"
    )
    assert await world.all_in([plain_run], RUNNING)
    error = await world.refused(op_a, agent=agent)
    assert f"tether kill --lift --agent {agent} --tenant {world.tenant_a}" in error["message"]
    other = await world.start(op_a)

    assert (
        await world.lift({"scope": "agent", "agent": agent, "tenant": world.tenant_a})
    ).status_code == 200
    await world.stop([plain_run, other, await world.start(op_a, agent=agent)])


async def test_a_parked_run_is_ended_and_its_approval_withdrawn(world: World) -> None:
    op_a, op_b = world.tokens["op-a"], world.tokens["op-b"]
    asks = [[call(CONFIRMED_TOOL, **CONVERT)], say("converted")]
    parked_a, parked_b = await world.start(op_a, asks), await world.start(op_b, asks)
    parked = ("awaiting_approval", None)
    await until(
        lambda: world.all_in([parked_a, parked_b], parked), timeout=60, what="two runs parked"
    )

    assert (await world.kill({"scope": "tenant", "tenant": world.tenant_a})).status_code == 201
    await until(
        lambda: world.all_in([parked_a], KILLED), timeout=LEASE_S, what="the parked run killed"
    )
    assert await world.all_in([parked_b], parked)

    async def withdrawn() -> bool:
        found = await world.http.get(f"/v1/runs/{parked_a}/approvals", headers=bearer(ADMIN))
        return [a["status"] for a in found.json()["approvals"]] == ["withdrawn"]

    await until(withdrawn, timeout=30, what="the parked run's approval withdrawn")
    await world.stop([parked_b])


async def test_a_kill_the_brain_was_not_told_of_is_read_with_its_sweep(world: World) -> None:
    """As a replica that missed the `kills.changed` notice: the kill is only in the table."""
    op_b = world.tokens["op-b"]
    run_id = await world.start(op_b)
    await until(lambda: world.all_in([run_id], RUNNING), timeout=60, what="a run running")
    async with world.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO kills (scope, tenant, killed_by, killed_at) "
                "VALUES ('tenant', :tenant, 'another replica', now())"
            ),
            {"tenant": world.tenant_b},
        )
    started = time.monotonic()
    await until(lambda: world.all_in([run_id], KILLED), timeout=LEASE_S, what="killed by a sweep")
    assert time.monotonic() - started <= LEASE_S
    assert (await world.statuses([run_id]))[run_id] == KILLED
    refusal = await world.refused(op_b)
    assert "stopped by another replica" in refusal["message"], refusal
    assert f"tether kill --lift --tenant {world.tenant_b}" in refusal["message"], refusal


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("route", ["/v1/kill", "/v1/kill/lift"], ids=["kill", "lift"])
async def test_only_admins_set_or_lift_a_kill(world: World, role: str, route: str) -> None:
    body = {"scope": "tenant", "tenant": world.tenant_a}
    answer = await world.http.post(route, json=body, headers=bearer(world.tokens[role]))
    assert (answer.status_code, answer.json()["error"]["code"]) == (403, "forbidden")
    anonymous = await world.http.post(route, json=body)
    assert anonymous.status_code == 401
    assert (await world.http.get("/v1/kill", headers=bearer(ADMIN))).json()["kills"] == []
    listing = await world.http.get("/v1/kill", headers=bearer(world.tokens[role]))
    assert listing.status_code == (200 if role in ("operator", "approver", "viewer") else 403)


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "all", "tenant": "x"},
        {"scope": "all", "agent": "x"},
        {"scope": "tenant"},
        {"scope": "tenant", "tenant": "x", "agent": "y"},
        {"scope": "agent"},
        {"scope": "agent", "tenant": "x"},
        {"scope": "everything"},
        {"scope": "tenant", "tenant": "not a tenant"},
        {"scope": "tenant", "tenant": "x\u0000"},
        {"scope": "all", "reason": "x" * 1001},
        {"scope": "all", "extra": True},
        {},
    ],
)
async def test_a_malformed_kill_is_refused_whole(world: World, body: dict[str, Any]) -> None:
    for answer in (await world.kill(body), await world.lift(body)):
        assert answer.status_code == 422, (body, answer.text)
    assert (await world.http.get("/v1/kill", headers=bearer(ADMIN))).json()["kills"] == []


# ---- a caller gone: the gateway stops generating (issue 30) ------------------------------


async def generating(stack_bus: Bus, start: Awaitable[str]) -> str:
    """Start a run and return its id once the gateway has been asked for its turn."""
    asked = await stack_bus.subscribe_raw(stack_bus.subjects.generate_all)
    try:
        run_id = await start
        while True:
            request = decode(GenerateRequest, (await asked.next_msg(timeout=60)).data)
            if request.run_id == run_id:
                return run_id
    finally:
        await asked.unsubscribe()


def gateway_log(stack: Supervisor) -> str:
    assert stack.log_dir is not None
    return (stack.log_dir / "gateway.log").read_text(errors="replace")


async def generation_cancelled(stack: Supervisor, run_id: str) -> bool:
    """The gateway's summary line of the run's generation says it was cut short."""
    return any(
        f"run_id={run_id} " in line and "outcome=cancelled" in line
        for line in gateway_log(stack).splitlines()
    )


async def cancelled_count(stack: Supervisor) -> float:
    async with httpx.AsyncClient(base_url=stack.child("gateway").url, timeout=10) as http:
        text = (await http.get("/metrics")).text
    found = re.search(
        r'^tether_bus_cancelled_total\{[^}]*service="gateway"[^}]*\} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


async def test_a_killed_run_stops_its_generation(
    world: World, stack: Supervisor, stack_bus: Bus
) -> None:
    before = await cancelled_count(stack)
    run_id = await generating(stack_bus, world.start(world.tokens["op-b"]))
    killed = await world.kill({"scope": "tenant", "tenant": world.tenant_b})
    assert killed.status_code == 201, killed.text
    await until(lambda: world.all_in([run_id], KILLED), timeout=LEASE_S, what="the run killed")
    # At once, not after the turn's 120 s pause: the gateway heard its caller go.
    await until(
        lambda: generation_cancelled(stack, run_id), timeout=5, what="the generation cancelled"
    )
    assert await cancelled_count(stack) >= before + 1


async def test_a_stopping_brain_leaves_the_gateway_nothing_to_wait_for(
    world: World, stack: Supervisor, stack_bus: Bus
) -> None:
    """A stack stops brain first: the gateway used to wait out the brain's abandoned
    generation for its whole shutdown wait (10 s) before it exited."""
    run_id = await generating(stack_bus, world.start(ADMIN))
    brain, gateway = stack.child("brain"), stack.child("gateway")
    try:
        await stack.stop_child(brain)
        stopped = time.monotonic()
        with contextlib.suppress(AssertionError):
            await until(lambda: generation_cancelled(stack, run_id), timeout=1.5, what="cancelled")
        cancelled_after = time.monotonic() - stopped
        await stack.stop_child(gateway)
        took = time.monotonic() - stopped - cancelled_after
        assert took < 2.0, f"the gateway took {took:.1f} s to stop"
        assert cancelled_after < 1.5, "the generation was not cancelled when its brain stopped"
    finally:
        for child in (gateway, brain):
            if child.proc is None:
                await stack.start_child(child)
        await stack.wait_ready(timeout=120, children=[gateway, brain])
        await world.stop([run_id])
