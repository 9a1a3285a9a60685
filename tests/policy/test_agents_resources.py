"""Agents and the organisation policy as resources, against two real brain processes on
the shared PostgreSQL and NATS: the CRUD round trip with versions (a stale write is 409),
strict validation, the `policy` audit trail with before/after digests, seeds written
once and never over a change, a change through one replica in force on the other within
a second (by the broadcast: the periodic reload is off here), who may change what, and
`tether agents list|show|apply|delete`.

The tool catalogue both replicas gate with comes from a stand-in catalogue responder on
the bus (no tools-runner is needed to show which policy a replica has in force).

Names are this module's own (`res-*` agents, `res*` tenants): the database is shared by
the whole session. The organisation-wide documents are never written here, since other
modules seed theirs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tether_client.cli import main
from tether_client.server.supervisor import SERVICES, Supervisor
from tether_common.bus import Bus
from tether_common.messages.tools import Catalog, CatalogRequest, ToolDescriptor
from tether_common.subjects import Subjects
from tether_common.testing import until

pytestmark = pytest.mark.e2e

OPERATOR_TOKEN = "test-operator-token"  # tests/conftest.py: the bootstrap admin
ADMIN = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
BRAIN = next(s for s in SERVICES if s.name == "brain")
TOOL = "res_lookup"
SEEDS = {
    "res-seeded": {"grants": ["calculate"], "tenant": "res1"},
    "res-kept": {"grants": ["calculate"], "tenant": "res1"},
    "res-gone": {"grants": [], "tenant": "res1"},
}
_META = ("id", "version", "source", "changed_by", "changed_at")


@dataclass
class Brains:
    env: dict[str, str]
    a: str
    b: str
    prefix: str


def brain_env(nats_url: str, database_url: str, prefix: str, scripts: Path) -> dict[str, str]:
    return {
        "TETHER_NATS_URL": nats_url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_SUBJECT_PREFIX": prefix,
        "TETHER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TETHER_GATEWAY_SCRIPTS_DIR": str(scripts),
        "TETHER_DB_POOL_SIZE": "6",
        "TETHER_BRAIN_AGENTS": json.dumps(SEEDS),
        # Only the broadcast can carry a change to the other replica within the test.
        "TETHER_BRAIN_GRANTS_REFRESH_S": "3600",
    }


@pytest.fixture(scope="module")
async def catalog_responder(nats_url: str) -> AsyncIterator[str]:
    """A prefix whose tool catalogue (one read tool, `res_lookup`) a stand-in answers."""
    prefix = f"r{uuid.uuid4().hex[:10]}"
    bus = await Bus.connect(nats_url, service="catalog-standin", subjects=Subjects(prefix))
    tool = ToolDescriptor(name=TOOL, description="look something up", parameters={})

    async def answer(_req: CatalogRequest) -> Catalog:
        return Catalog(tools=[tool])

    await bus.serve(bus.subjects.tool_catalog, answer)
    try:
        yield prefix
    finally:
        await bus.close()


@pytest.fixture(scope="module")
async def brains(
    nats_url: str,
    database_url: str,
    catalog_responder: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Brains]:
    """Two brain replicas (A and B), nothing else, seeded with `SEEDS`."""
    env = brain_env(nats_url, database_url, catalog_responder, tmp_path_factory.mktemp("s"))
    logs = tmp_path_factory.mktemp("logs")
    supervisor = Supervisor(env, specs=(BRAIN,), restart=False, log_dir=logs)
    second = supervisor.add_replica("brain")
    await supervisor.start()
    try:
        await supervisor.wait_ready(timeout=90)
        yield Brains(env, supervisor.child("brain").url, second.url, catalog_responder)
    except BaseException:
        for log_file in sorted(logs.glob("*.log")):
            print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201
        raise
    finally:
        await supervisor.stop()


async def token(url: str, name: str, role: str, tenant: str) -> dict[str, str]:
    """A new principal's bearer header."""
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as client:
        made = await client.post("/v1/tokens", json={"name": name, "role": role, "tenant": tenant})
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['token']}"}


def agent_body(**fields: Any) -> dict[str, Any]:
    return {"grants": ["calculate"], "tenant": "res1"} | fields


def spec(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in _META}


def digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def policy_records(database_url: str, resource: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT event, data FROM audit_records WHERE run_id = 'policy' ORDER BY seq"
        )
    finally:
        await conn.close()
    found = [{"event": r["event"]} | json.loads(r["data"]) for r in rows]
    return [r for r in found if r["resource"] == resource]


async def test_crud_round_trip_versions_and_audit(brains: Brains, database_url: str) -> None:
    name = f"res-crud-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as client:
        made = await client.post("/v1/agents", json={"id": name, **agent_body(mode="read-only")})
        assert made.status_code == 201, made.text
        assert (made.headers["etag"], made.json()["version"]) == ('"1"', 1)
        again = await client.post("/v1/agents", json={"id": name, **agent_body()})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "agent_exists")
        got = (await client.get(f"/v1/agents/{name}")).json()
        assert (got["mode"], got["grants"], got["tenant"]) == ("read-only", ["calculate"], "res1")
        v1 = spec(got)

        changed = agent_body(
            grants=["calculate", "shell?cmd=ls"],
            budgets={"max_steps": 4},
            ceilings={"max_steps": 8, "max_cost": 1.5},
            providers=["scripted"],
            models=["m1"],
            interactive=True,
            done={"min_chars": 3},
        )
        put = await client.put(f"/v1/agents/{name}", json=changed, headers={"If-Match": '"1"'})
        assert (put.status_code, put.headers["etag"]) == (200, '"2"'), put.text
        v2 = spec(put.json())
        assert (v2["ceilings"]["max_cost"], v2["providers"]) == (1.5, ["scripted"])
        # Stale: by If-Match, by the body's version, and for a delete.
        for stale in (
            client.put(f"/v1/agents/{name}", json=agent_body(), headers={"If-Match": '"1"'}),
            client.put(f"/v1/agents/{name}", json=agent_body(version=1)),
            client.put(f"/v1/agents/{name}", json=agent_body(version=7)),
            client.delete(f"/v1/agents/{name}", headers={"If-Match": 'W/"1"'}),
        ):
            answer = await stale
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                409,
                "version_conflict",
            )
        assert (await client.get(f"/v1/agents/{name}")).json()["version"] == 2
        listed = (await client.get("/v1/agents")).json()["agents"]
        assert name in {a["id"] for a in listed}

        gone = await client.delete(f"/v1/agents/{name}", headers={"If-Match": '"2"'})
        assert gone.status_code == 204
        assert (await client.get(f"/v1/agents/{name}")).status_code == 404
        assert (await client.put(f"/v1/agents/{name}", json=agent_body())).status_code == 404
        report = (await client.get("/v1/audit/policy")).json()
    assert report["intact"], report

    records = await policy_records(database_url, f"agent:{name}")
    assert [r["event"] for r in records] == ["agent.created", "agent.changed", "agent.deleted"]
    assert [(r["before"], r["after"]) for r in records] == [
        (None, digest(v1)),
        (digest(v1), digest(v2)),
        (digest(v2), None),
    ]
    assert {r["by"] for r in records} == {"operator"}
    # Digests only: no grant, rule or other value of the definition is in the trail.
    assert "calculate" not in json.dumps(records)


BAD_GRANTS = [
    "app.*?x=1",
    "bad.*.more",
    "tool#approve",
    "shell:write",
    "",
    "  ",
    "a b",
    "app*",
    "x.y.*:write?p=1",
]


@pytest.mark.parametrize("bad", BAD_GRANTS)
async def test_a_bad_grant_is_a_422_naming_it(brains: Brains, bad: str) -> None:
    name = f"res-bad-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as client:
        body = agent_body(grants=["calculate", bad])
        for answer in (
            await client.post("/v1/agents", json={"id": name, **body}),
            await client.put("/v1/agents/res-kept", json=body),
            await client.put(
                "/v1/policy/allowlist", params={"tenant": "res1"}, json={"entries": [bad]}
            ),
        ):
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["code"] == "invalid_request"
            assert "invalid grant" in error["message"], error
            assert f"'{bad}'" in error["message"], error
        assert (await client.get(f"/v1/agents/{name}")).status_code == 404


INVALID_BODIES: list[dict[str, Any]] = [
    {"grants": "calculate"},
    {"mode": "allow-everything"},
    {"categories": ["bogus"]},
    {"tenant": "has space"},
    {"tenant": "../x"},
    {"owner": ""},
    {"budgets": {"max_steps": 0}},
    {"ceilings": {"max_cost": -1}},
    {"budgets": {"max_forever": 3}},
    {"providers": [""]},
    {"fallback": [{"provider": "rules", "when": ["never"]}]},
    {"done": {"pattern": "(a"}},
    {"unknown_field": True},
    {"version": -1},
    {"grants": ["calculate"] * 501},
]


@pytest.mark.parametrize("extra", INVALID_BODIES, ids=[next(iter(b)) for b in INVALID_BODIES])
async def test_invalid_definitions_are_refused(brains: Brains, extra: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as client:
        answer = await client.put("/v1/agents/res-kept", json=agent_body() | extra)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_request")


async def test_invalid_policy_documents_are_refused(brains: Brains) -> None:
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as client:
        for path, body in (
            ("guardrails", {"rules": {"shell": "allow"}}),
            ("guardrails", {"rules": {"": "deny"}}),
            ("guardrails", {"rules": ["shell"]}),
            ("allowlist", {"entries": ["__none__"]}),
            ("allowlist", {"entries": "shell"}),
        ):
            answer = await client.put(f"/v1/policy/{path}", params={"tenant": "res1"}, json=body)
            assert answer.status_code == 422, (path, body, answer.text)
        for tenant in ("a b", "*", "x/y"):
            answer = await client.get("/v1/policy/guardrails", params={"tenant": tenant})
            assert answer.status_code == 422, tenant
        bad_tag = await client.put(
            "/v1/agents/res-kept", json=agent_body(), headers={"If-Match": "yesterday"}
        )
        assert bad_tag.status_code == 422


async def catalog(url: str, agent: str) -> dict[str, Any] | None:
    """The agent's catalogue as the replica has it in force (None: no such agent there)."""
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as client:
        answer = await client.get(f"/v1/agents/{agent}/tool-catalog")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def known(url: str, agent: str) -> dict[str, Any]:
    found = await catalog(url, agent)
    assert found is not None
    return found


async def in_force_within(url: str, agent: str, check: Any, limit_s: float = 1.0) -> float:
    """Poll the replica's catalogue until `check(catalog)` holds; the seconds it took
    (the assertion: at most `limit_s`)."""
    started = time.monotonic()
    await until(
        lambda: catalog(url, agent),
        done=lambda found: found is not None and check(found),
        timeout=limit_s,
        every=0.02,
        what=f"{agent}'s change in force on the other replica",
    )
    return time.monotonic() - started


def entry(found: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in found["tools"] if t["name"] == TOOL)


async def test_a_change_through_one_replica_is_in_force_on_the_other(brains: Brains) -> None:
    tenant = f"res{uuid.uuid4().hex[:6]}"
    name = f"res-live-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as a:
        made = await a.post("/v1/agents", json={"id": name, **agent_body(tenant=tenant)})
        assert made.status_code == 201
        # A new agent: known on B.
        await in_force_within(brains.b, name, lambda c: c["mode"] == "allow-reads")
        assert entry(await known(brains.b, name))["blocked"] is None

        # The tenant's guardrails deny the tool: on A at once, on B within a second.
        put = await a.put(
            "/v1/policy/guardrails", params={"tenant": tenant}, json={"rules": {TOOL: "deny"}}
        )
        assert put.status_code == 200, put.text
        assert entry(await known(brains.a, name))["blocked"] == "org_denied"
        await in_force_within(brains.b, name, lambda c: entry(c)["blocked"] == "org_denied")

        # The agent's mode and grants.
        changed = agent_body(tenant=tenant, mode="read-only", grants=["__none__"])
        assert (await a.put(f"/v1/agents/{name}", json=changed)).status_code == 200
        await in_force_within(brains.b, name, lambda c: c["mode"] == "read-only" and c["tool_less"])

        # Another tenant's agents are untouched by this tenant's guardrails.
        other = await a.get("/v1/agents/res-kept/tool-catalog")
        assert entry(other.json())["blocked"] is None

        # Through the grants route (policy_api), the same row: B sees it, and its version moves.
        version = (await a.get(f"/v1/agents/{name}")).json()["version"]
        grants = await a.put(f"/v1/agents/{name}/grants", json={"grants": ["calculate"]})
        assert grants.status_code == 200, grants.text
        await in_force_within(brains.b, name, lambda c: not c["tool_less"])
        after = (await a.get(f"/v1/agents/{name}")).json()
        assert (after["version"], after["grants"]) == (version + 1, ["calculate"])

        # Deleted: gone from B.
        assert (await a.delete(f"/v1/agents/{name}")).status_code == 204
    async with httpx.AsyncClient(base_url=brains.b, timeout=30, headers=ADMIN) as b:
        await until(
            lambda: b.get(f"/v1/agents/{name}/tool-catalog"),
            done=lambda response: response.status_code == 404,
            timeout=1.0,
            every=0.02,
            what="the deleted agent gone from B",
        )


async def test_seeds_are_written_once_and_never_over_a_change(
    brains: Brains, tmp_path_factory: pytest.TempPathFactory
) -> None:
    async with httpx.AsyncClient(base_url=brains.a, timeout=30, headers=ADMIN) as client:
        seeded = (await client.get("/v1/agents/res-seeded")).json()
        assert (seeded["source"], seeded["changed_by"]) == ("settings", "settings")
        kept = (await client.get("/v1/agents/res-kept")).json()
        edit = spec(kept) | {"grants": ["calculate", "convert_time"], "mode": "read-only"}
        assert (await client.put("/v1/agents/res-kept", json=edit)).status_code == 200
        assert (await client.delete("/v1/agents/res-gone")).status_code == 204

    # A replica started later with different settings.
    reseed = {name: {"grants": ["current_time"], "tenant": "res1"} for name in SEEDS}
    reseed["res-new"] = {"grants": [], "tenant": "res1", "owner": "someone"}
    env = brains.env | {"TETHER_BRAIN_AGENTS": json.dumps(reseed)}
    third = Supervisor(env, specs=(BRAIN,), restart=False, log_dir=tmp_path_factory.mktemp("l"))
    await third.start()
    try:
        await third.wait_ready(timeout=90)
        url = third.child("brain").url
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=ADMIN) as client:
            kept_now = (await client.get("/v1/agents/res-kept")).json()
            assert (kept_now["grants"], kept_now["mode"]) == (edit["grants"], "read-only")
            assert kept_now["source"] == "api"
            assert (await client.get("/v1/agents/res-gone")).status_code == 404
            assert (await client.get("/v1/agents/res-new")).json()["owner"] == "someone"
            # Never changed through the API: still the seed, so it follows the settings.
            assert (await client.get("/v1/agents/res-seeded")).json()["grants"] == ["current_time"]
    finally:
        await third.stop()
    # The replicas already serving were told (no periodic reload in this module).
    await in_force_within(brains.b, "res-new", lambda c: c["owner"] == "someone")


async def test_who_may_read_and_change_agents_and_policy(brains: Brains) -> None:
    url = brains.a
    tenant, elsewhere = f"res{uuid.uuid4().hex[:6]}", f"res{uuid.uuid4().hex[:6]}"
    olive = f"olive{uuid.uuid4().hex[:6]}"
    operator = await token(url, f"op{uuid.uuid4().hex[:6]}", "operator", tenant)
    stranger = await token(url, f"op{uuid.uuid4().hex[:6]}", "operator", elsewhere)
    owner = await token(url, olive, "owner", tenant)
    client_ = await token(url, f"cl{uuid.uuid4().hex[:6]}", "client", tenant)
    mine, theirs = f"res-own-{uuid.uuid4().hex[:6]}", f"res-other-{uuid.uuid4().hex[:6]}"
    body = agent_body(tenant=tenant, owner=olive)

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def call(method: str, path: str, who: dict[str, str] | None, **kw: Any) -> int:
            return (await http.request(method, path, headers=who or {}, **kw)).status_code

        # The tenant's operator creates agents in its tenant, never in another.
        assert await call("POST", "/v1/agents", operator, json={"id": mine, **body}) == 201
        assert (
            await call(
                "POST",
                "/v1/agents",
                operator,
                json={"id": theirs, **agent_body(tenant=elsewhere)},
            )
            == 403
        )
        assert (
            await call(
                "POST", "/v1/agents", stranger, json={"id": theirs, **agent_body(tenant=elsewhere)}
            )
            == 201
        )
        # Nobody without a token; a client never; an owner neither creates nor deletes.
        for who in (None, client_, owner):
            expected = 401 if who is None else 403
            listing = 401 if who is None else 403 if who is client_ else 200
            assert await call("GET", "/v1/agents", who) == listing
            assert await call("POST", "/v1/agents", who, json={"id": "res-x", **body}) == expected
            assert await call("DELETE", f"/v1/agents/{mine}", who) == expected
            if who is not owner:
                assert await call("PUT", f"/v1/agents/{mine}", who, json=body) == expected
        # Another tenant's agent looks missing, in a listing too.
        for method, kw in (("GET", {}), ("PUT", {"json": body}), ("DELETE", {})):
            assert await call(method, f"/v1/agents/{theirs}", operator, **kw) == 404
            assert await call(method, f"/v1/agents/{mine}", stranger, **kw) == 404
        seen = (await http.get("/v1/agents", headers=operator)).json()["agents"]
        assert mine in {a["id"] for a in seen}
        assert {a["tenant"] for a in seen if not a["shared"]} == {tenant}  # + shared ones
        # An operator may not move an agent out of its tenant.
        moved = body | {"tenant": elsewhere}
        assert await call("PUT", f"/v1/agents/{mine}", operator, json=moved) == 403

        # The owner: its own agent only, and not the operators' fields.
        assert [
            a["id"]
            for a in (await http.get("/v1/agents", headers=owner)).json()["agents"]
            if not a["shared"]
        ] == [mine]
        assert await call("GET", f"/v1/agents/{theirs}", owner) == 404
        narrowed = body | {"grants": ["calculate", "convert_time"], "mode": "read-only"}
        assert await call("PUT", f"/v1/agents/{mine}", owner, json=narrowed) == 200
        for field, value in (
            ("owner", "mallory"),
            ("tenant", elsewhere),
            ("providers", ["openai"]),
            ("models", ["gpt"]),
            ("fallback", [{"provider": "openai", "model": "gpt"}]),
            ("ceilings", {"max_cost": 1e6}),
            ("untrusted_bar", False),
            ("waiver_lifts_taint", True),
        ):
            assert (
                await call("PUT", f"/v1/agents/{mine}", owner, json=narrowed | {field: value})
                == 403
            ), field
        assert (await http.get(f"/v1/agents/{mine}", headers=ADMIN)).json()["owner"] == olive

        # Policy documents: the tenant's by its operators, the organisation's by admins.
        rules = {"json": {"rules": {"shell": "confirm"}}}
        assert (
            await call("PUT", "/v1/policy/guardrails", operator, params={"tenant": tenant}, **rules)
            == 200
        )
        assert await call("PUT", "/v1/policy/guardrails", operator, **rules) == 403
        assert await call("PUT", "/v1/policy/allowlist", operator, json={"entries": []}) == 403
        assert await call("GET", "/v1/policy/guardrails", operator) == 200
        for who, status in ((stranger, 404), (owner, 403), (client_, 403), (None, 401)):
            params = {"tenant": tenant}
            assert await call("GET", "/v1/policy/guardrails", who, params=params) == status
            assert await call("PUT", "/v1/policy/guardrails", who, params=params, **rules) == status
        found = (
            await http.get("/v1/policy/guardrails", headers=ADMIN, params={"tenant": tenant})
        ).json()
        assert (found["rules"], found["version"]) == ({"shell": "confirm"}, 1)
        assert await call("DELETE", f"/v1/agents/{mine}", operator) == 204


async def tether(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    return code, capsys.readouterr().out


async def test_cli_apply_show_list_delete(
    brains: Brains,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TETHER_API_URL", brains.a)
    monkeypatch.setenv("TETHER_TOKEN", OPERATOR_TOKEN)
    name = f"res-cli-{uuid.uuid4().hex[:6]}"
    first = tmp_path / "agent.yaml"
    first.write_text(
        f"id: {name}\ntenant: res1\nmode: read-only\ngrants:\n  - calculate\n"
        "budgets:\n  max_steps: 3\n"
    )
    code, out = await tether(capsys, "agents", "apply", "-f", str(first))
    assert (code, out.split(":")[0]) == (0, "created"), out
    code, out = await tether(capsys, "agents", "show", name, "-o", "json")
    shown = json.loads(out)
    assert (shown["mode"], shown["budgets"]["max_steps"], shown["version"]) == ("read-only", 3, 1)

    second = tmp_path / "agent.json"
    second.write_text(json.dumps({"id": name, "tenant": "res1", "grants": ["convert_time"]}))
    code, out = await tether(capsys, "agents", "apply", "-f", str(second))
    assert (code, out.split(":")[0]) == (0, "changed"), out
    code, out = await tether(capsys, "agents", "list")
    assert code == 0
    assert any(line.startswith(name) and "v2" in line for line in out.splitlines()), out

    stale = tmp_path / "stale.yaml"
    stale.write_text(f"id: {name}\nversion: 1\ngrants: []\n")
    code, _ = await tether(capsys, "agents", "apply", "-f", str(stale))
    assert code == 6  # conflict: a stale version
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"id: {name}\ngrants: ['app.*?x=1']\n")
    code, _ = await tether(capsys, "agents", "apply", "-f", str(broken))
    assert code == 2
    code, out = await tether(capsys, "agents", "delete", name)
    assert code == 0
    code, _ = await tether(capsys, "agents", "show", name)
    assert code == 5  # not found


async def test_cli_one_id_in_two_tenants_and_sharing(
    brains: Brains,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """An id is unique per tenant: the same id applied in two tenants is two agents, each
    shown and deleted with `--tenant`; an admin's `shared: true` is listed as shared."""
    monkeypatch.setenv("TETHER_API_URL", brains.a)
    monkeypatch.setenv("TETHER_TOKEN", OPERATOR_TOKEN)
    name = f"res-twice-{uuid.uuid4().hex[:6]}"
    for tenant, extra in (("res1", "shared: true\n"), ("res2", "")):
        document = tmp_path / f"{tenant}.yaml"
        document.write_text(f"id: {name}\ntenant: {tenant}\n{extra}grants:\n  - calculate\n")
        code, out = await tether(capsys, "agents", "apply", "-f", str(document))
        assert (code, out.split(":")[0]) == (0, "created"), out
    code, out = await tether(capsys, "agents", "list")
    mine = sorted(line.split()[2::4] for line in out.splitlines() if line.startswith(name))
    assert mine == [["res1", "shared"], ["res2", "-"]], out
    code, _ = await tether(capsys, "agents", "show", name)
    assert code == 2  # in two tenants: which one is for the admin to say
    code, out = await tether(capsys, "agents", "show", name, "--tenant", "res2", "-o", "json")
    assert (code, json.loads(out)["tenant"], json.loads(out)["shared"]) == (0, "res2", False)
    for tenant in ("res1", "res2"):
        code, _ = await tether(capsys, "agents", "delete", name, "--tenant", tenant)
        assert code == 0
    code, _ = await tether(capsys, "agents", "show", name, "--tenant", "res1")
    assert code == 5


async def stored_limits(database_url: str, run_id: str) -> dict[str, Any]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        row = await conn.fetchrow("SELECT max_steps, limits FROM runs WHERE run_id = $1", run_id)
    finally:
        await conn.close()
    assert row is not None
    limits: dict[str, Any] = json.loads(row["limits"])
    return {"max_steps": row["max_steps"]} | limits


async def test_a_new_run_uses_the_agent_as_stored(brains: Brains, database_url: str) -> None:
    """Providers, models and budgets of the stored agent hold at the start of a run, and
    an agent put in a tenant is not another tenant's to use."""
    tenant, elsewhere = f"res{uuid.uuid4().hex[:6]}", f"res{uuid.uuid4().hex[:6]}"
    name = f"res-run-{uuid.uuid4().hex[:6]}"
    operator = await token(brains.a, f"op{uuid.uuid4().hex[:6]}", "operator", tenant)
    stranger = await token(brains.a, f"op{uuid.uuid4().hex[:6]}", "operator", elsewhere)
    body = agent_body(
        tenant=tenant,
        providers=["rules"],
        budgets={"max_steps": 3, "max_tool_calls": 2},
        ceilings={"max_steps": 4, "max_seconds": 30.0},
    )
    started: list[str] = []
    async with httpx.AsyncClient(base_url=brains.a, timeout=30) as http:
        made = await http.post("/v1/agents", json={"id": name, **body}, headers=ADMIN)
        assert made.status_code == 201
        for choice in ({"provider": "scripted"}, {"provider": "openai", "model": "x"}):
            refused = await http.post(
                "/v1/runs", json={"prompt": "hi", "agent": name} | choice, headers=operator
            )
            assert refused.status_code == 403, refused.text
            assert "agent" in refused.json()["error"]["message"]
        missing = await http.post(
            "/v1/runs", json={"prompt": "hi", "agent": name, "provider": "rules"}, headers=stranger
        )
        assert missing.status_code == 404, missing.text
        for asked, expected in (
            ({}, {"max_steps": 3, "max_tool_calls": 2, "max_seconds": 30.0}),
            ({"max_steps": 9, "max_seconds": 600}, {"max_steps": 4, "max_seconds": 30.0}),
            ({"max_tool_calls": 1}, {"max_steps": 3, "max_tool_calls": 1}),
        ):
            run = await http.post(
                "/v1/runs",
                json={"prompt": "hi", "agent": name, "provider": "rules"} | asked,
                headers=operator,
            )
            assert run.status_code == 201, run.text
            started.append(run.json()["run_id"])
            limits = await stored_limits(database_url, started[-1])
            assert {k: limits.get(k) for k in expected} == expected
        for run_id in started:  # no gateway here: the runs would wait for a model
            await http.post(f"/v1/runs/{run_id}/stop", headers=ADMIN)
