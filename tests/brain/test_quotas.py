"""Quotas through the real services (issue 31), with two brain replicas sharing the
database: concurrent runs and runs a minute never admitted past the limit when starts
race on both replicas at once; a run over its tenant's token quota finishes its step and
stops `quota_exceeded`, and the next start (on the other replica) is refused; an
agent's quota below its tenant's; another tenant untouched; the refusal's shape (429,
`Retry-After`, the limit, the use, the reset) over HTTP, the bus start route and the
OpenAI face; only admins set a tenant's quota, audited, and the CLI shows and sets it.

Each test has tenants of its own (every stack of the session shares the database)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from shipped import as_client
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common.errors import QuotaExceededError
from tether_common.identity import bearer_headers
from tether_common.messages.quotas import QuotaRefusal
from tether_common.messages.runs import StartRun
from tether_common.testing import call, say, until, write_script

pytestmark = pytest.mark.e2e

ADMIN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: the bootstrap admin
WAITING = [[{"pause_s": 120}, *say("never said: the run is stopped first")]]
QUICK = [say("done")]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class World:
    """Both brains over HTTP, the admin, a fresh tenant per test, the shared database."""

    def __init__(self, brains: list[httpx.AsyncClient], engine: AsyncEngine, scripts: Path):
        self.brains = brains
        self.engine = engine
        self.scripts = scripts
        self.started: list[str] = []

    async def tenant(self, role: str = "operator") -> tuple[str, str]:
        """A new tenant and a token of `role` in it."""
        tenant = f"q-{uuid.uuid4().hex[:8]}"
        body = {"name": f"{role}-{tenant}", "role": role, "tenant": tenant}
        made = await self.brains[0].post("/v1/tokens", json=body, headers=bearer(ADMIN))
        assert made.status_code == 201, made.text
        return tenant, str(made.json()["token"])

    async def set_quota(self, tenant: str, **limits: Any) -> dict[str, Any]:
        put = await self.brains[1].put(
            f"/v1/quotas/{tenant}", json={"quota": limits}, headers=bearer(ADMIN)
        )
        assert put.status_code == 200, put.text
        return dict(put.json())

    async def start(
        self, token: str, turns: list[Any] = WAITING, *, brain: int = 0, **options: Any
    ) -> httpx.Response:
        model = write_script(self.scripts, turns)
        body = {"prompt": "work", "provider": "scripted", "model": model} | options
        answer = await self.brains[brain % 2].post("/v1/runs", json=body, headers=bearer(token))
        if answer.status_code == 201:
            self.started.append(str(answer.json()["run_id"]))
        return answer

    async def burst(self, token: str, n: int, turns: list[Any] = WAITING) -> list[httpx.Response]:
        """`n` starts at the same instant, alternately on each replica."""
        return list(await asyncio.gather(*(self.start(token, turns, brain=i) for i in range(n))))

    async def status(self, run_id: str) -> tuple[str, str | None]:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT status, stop_reason FROM runs WHERE run_id = :r"), {"r": run_id}
                )
            ).one()
            return str(row.status), row.stop_reason

    async def live(self, tenant: str) -> int:
        async with self.engine.connect() as conn:
            found = await conn.scalar(
                text(
                    "SELECT count(*) FROM runs WHERE tenant = :t AND status NOT IN "
                    "('completed', 'stopped', 'failed')"
                ),
                {"t": tenant},
            )
            return int(found or 0)

    async def ended(self, run_id: str) -> bool:
        return (await self.status(run_id))[0] in ("completed", "stopped", "failed")

    async def stop_all(self) -> None:
        for run_id in self.started:
            await self.brains[0].post(f"/v1/runs/{run_id}/stop", headers=bearer(ADMIN))
        self.started.clear()


@pytest.fixture(scope="module")
async def replicas(stack: Supervisor) -> list[str]:
    """The stack's brain and a second replica of it, both serving."""
    second = stack.add_replica("brain")
    await stack.start_child(second)
    await stack.wait_ready(children=[second])
    return [stack.child("brain").url, second.url]


@pytest.fixture
async def world(
    replicas: list[str], engine: AsyncEngine, scripts_dir: Path
) -> AsyncIterator[World]:
    async with (
        httpx.AsyncClient(base_url=replicas[0], timeout=60) as first,
        httpx.AsyncClient(base_url=replicas[1], timeout=60) as second,
    ):
        found = World([first, second], engine, scripts_dir)
        try:
            yield found
        finally:
            await found.stop_all()


def refusal_of(answer: httpx.Response) -> QuotaRefusal:
    """The refusal of a 429: `quota_exceeded`, `Retry-After` as its `retry_after` (up)."""
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert error["code"] == "quota_exceeded", error
    found = QuotaRefusal.model_validate(error["details"])
    assert error["retry_after"] == found.retry_after
    assert int(answer.headers["Retry-After"]) >= found.retry_after
    assert found.limit in error["message"]
    return found


@pytest.mark.timeout(180)
@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_concurrent_runs_never_pass_the_limit_when_two_replicas_race(
    world: World, limit: int
) -> None:
    tenant, token = await world.tenant()
    await world.set_quota(tenant, concurrent_runs=limit)
    answers = await world.burst(token, 3 * limit + 3)

    admitted = [a for a in answers if a.status_code == 201]
    refused = [refusal_of(a) for a in answers if a.status_code != 201]
    assert len(admitted) == limit, [a.text for a in answers]
    assert await world.live(tenant) == limit
    for found in refused:
        assert (found.scope, found.tenant, found.agent) == ("tenant", tenant, None)
        assert (found.limit, found.allowed, found.used) == ("concurrent_runs", limit, limit)
        assert found.resets_at is None  # frees when one of them ends
        assert 0 < found.retry_after <= 5

    # A slot is freed by its run's end, whichever way it ends: a stop here.
    first = str(admitted[0].json()["run_id"])
    await world.brains[1].post(f"/v1/runs/{first}/stop", headers=bearer(ADMIN))
    await until(lambda: world.ended(first), timeout=30, what="the stopped run ends")
    again = await world.burst(token, 3)
    assert sorted(a.status_code for a in again) == [201, 429, 429], [a.text for a in again]


@pytest.mark.timeout(180)
async def test_runs_per_minute_never_pass_the_limit_across_replicas(world: World) -> None:
    tenant, token = await world.tenant()
    await world.set_quota(tenant, runs_per_minute=3)
    started = time.monotonic()
    answers = await world.burst(token, 10, QUICK)
    assert sorted(a.status_code for a in answers) == [201] * 3 + [429] * 7
    for found in (refusal_of(a) for a in answers if a.status_code == 429):
        assert (found.limit, found.allowed, found.used) == ("runs_per_minute", 3, 3)
        assert 0 < found.retry_after <= 60
        assert found.resets_at is not None
    # Sequential starts after the burst, on either replica, are refused too.
    late = await world.start(token, QUICK, brain=1)
    assert refusal_of(late).retry_after <= 60 - (time.monotonic() - started) + 1


@pytest.mark.timeout(180)
async def test_a_run_over_its_tenants_token_quota_finishes_its_step_then_stops(
    world: World,
) -> None:
    tenant, token = await world.tenant()
    await world.set_quota(tenant, tokens_per_day=150)
    usage = {"kind": "usage", "input_tokens": 80, "output_tokens": 20}
    turns = [
        [call("current_time", timezone="UTC"), usage],
        [call("current_time", timezone="Asia/Tokyo"), usage],
        [usage, *say("never reached: the quota is spent before this step")],
    ]
    answer = await world.start(token, turns)
    assert answer.status_code == 201, answer.text
    run_id = str(answer.json()["run_id"])
    await until(lambda: world.ended(run_id), timeout=60, what="the run stops")

    status, reason = await world.status(run_id)
    assert status == "stopped"
    assert reason is not None
    assert reason.startswith("quota_exceeded: the tokens_per_day quota of tenant"), reason
    view = (await world.brains[0].get(f"/v1/runs/{run_id}", headers=bearer(ADMIN))).json()
    # The step that went past the quota was finished (its tool ran) and counted.
    assert view["usage"]["input_tokens"] + view["usage"]["output_tokens"] == 200
    assert [s["kind"] for s in view["steps"]].count("tool") == 2

    found = refusal_of(await world.start(token, QUICK, brain=1))
    assert (found.limit, found.allowed, found.used) == ("tokens_per_day", 150, 200)
    assert found.resets_at is not None
    assert found.resets_at.hour == found.resets_at.minute == 0
    shown = (await world.brains[1].get(f"/v1/quotas/{tenant}", headers=bearer(token))).json()
    assert {u["limit"]: u["used"] for u in shown["usage"]}["tokens_per_day"] == 200

    # Another tenant, under no quota, is untouched by this one's.
    _other, other_token = await world.tenant()
    assert (await world.start(other_token, QUICK, brain=1)).status_code == 201


@pytest.mark.timeout(180)
async def test_an_agents_quota_below_its_tenants_and_every_start_route_refuses(
    world: World, stack: Supervisor
) -> None:
    tenant, token = await world.tenant()
    agent = f"qbot-{uuid.uuid4().hex[:6]}"
    made = await world.brains[0].post(
        "/v1/agents",
        json={"id": agent, "tenant": tenant, "quota": {"concurrent_runs": 1}},
        headers=bearer(ADMIN),
    )
    assert made.status_code == 201, made.text
    await world.set_quota(tenant, concurrent_runs=3)

    assert (await world.start(token, agent=agent)).status_code == 201
    found = refusal_of(await world.start(token, agent=agent, brain=1))
    assert (found.scope, found.agent, found.limit, found.allowed) == (
        "agent",
        agent,
        "concurrent_runs",
        1,
    )
    # The tenant's other agents still have its quota's room: two more, then none.
    assert (await world.start(token)).status_code == 201
    assert (await world.start(token, brain=1)).status_code == 201
    found = refusal_of(await world.start(token))
    assert (found.scope, found.limit, found.used) == ("tenant", "concurrent_runs", 3)

    face = await world.brains[1].post(
        "/v1/chat/completions",
        json={"model": "default", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(token),
    )
    assert face.status_code == 429, face.text
    assert face.json()["error"]["code"] == "quota_exceeded"
    assert face.json()["error"]["type"] == "rate_limit_error"
    assert int(face.headers["Retry-After"]) >= 1

    bus = await as_client(stack)
    try:
        with pytest.raises(QuotaExceededError) as refused:
            await bus.request(
                bus.subjects.run_start,
                StartRun(
                    prompt="hi", provider="scripted", model=write_script(world.scripts, QUICK)
                ),
                headers=bearer_headers(token),
            )
    finally:
        await bus.close()
    assert refused.value.retry_after is not None
    assert refused.value.details is not None
    assert QuotaRefusal.model_validate(refused.value.details).limit == "concurrent_runs"

    # Its tenant's operators may change an agent's quota: the tenant's (an admin's) caps it.
    changed = await world.brains[0].put(
        f"/v1/agents/{agent}?tenant={tenant}",
        json={"tenant": tenant, "quota": {"concurrent_runs": 5}},
        headers=bearer(token),
    )
    assert changed.status_code == 200, changed.text


@pytest.mark.timeout(120)
async def test_only_admins_set_a_tenants_quota_audited_and_the_cli_shows_it(
    world: World,
    engine: AsyncEngine,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, operator = await world.tenant()
    other, other_operator = await world.tenant()
    http = world.brains[0]
    url = f"/v1/quotas/{tenant}"
    body = {"quota": {"tokens_per_hour": 10}}
    assert (await http.put(url, json=body, headers=bearer(operator))).status_code == 403
    assert (await http.get(url, headers=bearer(other_operator))).status_code == 404
    fresh = await http.get(url, headers=bearer(operator))
    assert (fresh.status_code, fresh.json()["version"]) == (200, 0)

    put = await http.put(url, json=body | {"version": 0}, headers=bearer(ADMIN))
    assert (put.status_code, put.headers["ETag"]) == (200, '"1"'), put.text
    stale = await http.put(url, json=body | {"version": 0}, headers=bearer(ADMIN))
    assert (stale.status_code, stale.json()["error"]["code"]) == (409, "version_conflict")
    bad = await http.put(url, json={"quota": {"tokens_per_hour": -1}}, headers=bearer(ADMIN))
    assert bad.status_code == 422
    async with engine.connect() as conn:
        events = (
            await conn.execute(
                text(
                    "SELECT event FROM audit_records WHERE run_id = 'policy' "
                    "AND CAST(data AS jsonb)->>'resource' = :r"
                ),
                {"r": f"quota:{tenant}"},
            )
        ).all()
    assert [e.event for e in events] == ["quota.changed"]

    monkeypatch.setenv("TETHER_API_URL", str(http.base_url))
    monkeypatch.setenv("TETHER_TOKEN", ADMIN)
    capsys.readouterr()
    argv = ["quota", "set", tenant, "--concurrent-runs", "4", "-o", "json"]
    assert await asyncio.to_thread(main, argv) == 0
    shown = capsys.readouterr().out
    assert '"concurrent_runs": 4' in shown
    assert '"tokens_per_hour": 10' in shown  # kept: only --clear drops the others
    assert await asyncio.to_thread(main, ["quota", "show", tenant]) == 0
    table = capsys.readouterr().out
    assert "concurrent_runs" in table
    assert "tokens_per_day" in table
    assert other not in table
