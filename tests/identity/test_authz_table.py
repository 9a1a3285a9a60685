"""Every route of the brain's, the output-store's and the approvals service's OpenAPI
documents, and every client request subject of the brain, walked with three callers:
anonymous → 401 (`unauthenticated`); a valid token of another tenant → 403/404 (or, for
a route naming no resource, an answer holding nothing of the other tenant); the right
token → anything but 401/403.

Routes come from the running services' `/openapi.json` (paths × methods), never from a
list here, so a route added later without authorisation fails this test; only
`PUBLIC` may answer an anonymous caller.

Agents by tenant (`AGENT_TABLE`): for each caller, which agents it may start a run of,
read, and be offered by the faces (`/v1/models`, the MCP tool list): its tenant's own,
shared ones, the built-in default; never another tenant's (the default one's included).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from shipped import as_client, observe
from tether_client.server.supervisor import SERVICES as ALL_SERVICES
from tether_client.server.supervisor import Supervisor
from tether_client.server.testing.authz import (
    PRIVILEGED,
    World,
    bearer,
    build_world,
    error_code,
    leaks,
    stack_env,
)
from tether_common.identity import bearer_headers
from tether_common.settings import CommonSettings
from tether_common.subjects import QUEUE_BRAIN

pytestmark = pytest.mark.e2e
SHIPPED = Path(__file__).resolve().parents[2] / "skills"  # the shipped skills

# Routes that answer anyone, by design: liveness and readiness probes.
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
METHODS = ("get", "post", "put", "patch", "delete")
SERVICES = ("brain", "output-store", "approvals")
# Outside tenants: a client and an operator of tenant B.
OUTSIDERS = ("bob", "opb")

Send = Callable[[str, str, str, dict[str, str]], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Row:
    service: str
    method: str
    path: str  # the template, as in the OpenAPI document

    @property
    def names_a_resource(self) -> bool:
        return "{" in self.path


@pytest.fixture(scope="module")
def stack_extra_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return stack_env(tmp_path_factory.mktemp("skills"), SHIPPED)


@pytest.fixture(scope="module")
async def world(stack: Supervisor) -> World:
    bus = await observe(stack)
    try:
        return await build_world(stack, bus)
    finally:
        await bus.close()


def rows_of(service: str, document: dict[str, Any]) -> list[Row]:
    return [
        Row(service, method.upper(), path)
        for path, item in document["paths"].items()
        for method in METHODS
        if method in item
    ]


@pytest.fixture(scope="module")
async def table(world: World, stack: Supervisor) -> list[Row]:
    rows: list[Row] = []
    async with httpx.AsyncClient(timeout=30) as http:
        for service in SERVICES:
            url = f"{stack.child(service).url}/openapi.json"
            document = (await http.get(url, headers=world.headers("admin"))).json()
            rows += rows_of(service, document)
    return rows


def concrete(row: Row, world: World, *, made_up: bool = False) -> str:
    """The path with tenant A's resources (or a made-up id) in its parameters; all
    made up with `made_up` (the admin's deleting rows delete nothing real)."""
    if made_up:
        return re.sub(r"\{(\w+)\}", "nothing0", row.path)
    values = {
        "run_id": world.runs["alice"],
        "ref": world.output_a,
        "name": world.skill_a,
        "agent_id": world.agent_a,
        "token_id": "tok_00000000000000000000",
        "approval_id": "apr_00000000000000000000",
    }
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], "x0"), row.path)


def body_for(row: Row) -> Any:
    return {} if row.method in ("POST", "PUT", "PATCH") else None


def sender(world: World, stack: Supervisor, http: httpx.AsyncClient) -> Send:
    """Send one request; an event stream that opens is answered by its status and
    headers alone (it would not end), with an empty body."""

    async def send(service: str, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        url = stack.child(service).url + path
        body = body_for(Row(service, method, path))
        async with http.stream(method, url, json=body, headers=headers) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                STREAMS.add((service, path))
                return httpx.Response(response.status_code, headers=response.headers)
            await response.aread()
            return response

    return send


# The event streams met (each opened by a caller it let through).
STREAMS: set[tuple[str, str]] = set()


async def anonymous_problems(rows: list[Row], world: World, send: Send) -> list[str]:
    """Every non-public route answers an anonymous caller (and forged tokens) 401."""
    problems = []
    for row in rows:
        if (row.method, row.path) in PUBLIC:
            continue
        for headers in ({}, {"Authorization": "Bearer tth_forged"}, {"Authorization": "x"}):
            response = await send(row.service, row.method, concrete(row, world), headers)
            if response.status_code != 401 or error_code(response) != "unauthenticated":
                problems.append(f"{row} with {headers}: {response.status_code}")
            elif leaks(response, world.mark_a):
                problems.append(f"{row}: an anonymous answer shows tenant A")
    return problems


async def test_the_table_covers_every_service(table: list[Row]) -> None:
    covered = {row.service for row in table}
    assert covered == set(SERVICES)
    assert {("GET", "/v1/runs/{run_id}"), ("POST", "/v1/skills")} <= {
        (r.method, r.path) for r in table
    }


async def test_anonymous_callers_get_401_everywhere(
    table: list[Row], world: World, stack: Supervisor
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        problems = await anonymous_problems(table, world, sender(world, stack, http))
    assert not problems, "\n".join(problems)


async def test_another_tenants_token_reaches_nothing_of_tenant_a(
    table: list[Row], world: World, stack: Supervisor
) -> None:
    problems = []
    async with httpx.AsyncClient(timeout=30) as http:
        send = sender(world, stack, http)
        for row in table:
            if (row.method, row.path) in PUBLIC:
                continue
            for who in OUTSIDERS:
                response = await send(
                    row.service, row.method, concrete(row, world), world.headers(who)
                )
                status = response.status_code
                if leaks(response, world.mark_a):
                    problems.append(f"{row} as {who}: the answer shows tenant A")
                if status == 401 or status >= 500:
                    problems.append(f"{row} as {who}: {status} {response.text[:200]}")
                elif row.names_a_resource and status not in (403, 404, 422):
                    # 422: the made-up body was refused (only reachable for a route
                    # that checks its caller before anything; the skill and run rows
                    # carry real ids and no body).
                    problems.append(f"{row} as {who}: {status} {response.text[:200]}")
    assert not problems, "\n".join(problems)
    # Tenant A's things are all still there (nothing an outsider sent changed them).
    async with httpx.AsyncClient(base_url=world.brain, timeout=30) as http:
        run = await http.get(f"/v1/runs/{world.runs['alice']}", headers=world.headers("alice"))
        assert run.status_code == 200
        skill = await http.get(f"/v1/skills/{world.skill_a}", headers=world.headers("opa"))
        assert skill.status_code == 200


async def test_the_right_token_is_let_through(
    table: list[Row], world: World, stack: Supervisor
) -> None:
    """The admin reaches every route: no 401/403 (a 404 for a made-up id, or a 422 for
    an empty body, is past the check). Deleting routes name made-up ids, so they delete
    nothing another test needs (the tests run in any order)."""
    problems = []
    async with httpx.AsyncClient(timeout=30) as http:
        send = sender(world, stack, http)
        for row in table:
            path = concrete(row, world, made_up=row.method == "DELETE")
            response = await send(row.service, row.method, path, world.headers("admin"))
            if response.status_code in (401, 403) or response.status_code >= 500:
                problems.append(f"{row}: {response.status_code} {response.text[:200]}")
    assert not problems, "\n".join(problems)


async def test_every_client_subject_checks_its_caller(world: World, stack: Supervisor) -> None:
    """The brain's client subjects over NATS: the same three callers, the same rules."""
    bus = await as_client(stack)  # as an API client connects
    candidates = {
        "run_id": world.runs["alice"],
        "thread_id": "thr_none",  # no thread is anyone's: the caller is checked first
        "text": "hi",
        "prompt": "hi",
        "limit": 500,
    }
    routes = [r for r in world.subjects.routes() if r.queue == QUEUE_BRAIN]
    assert len(routes) >= 5
    problems = []
    try:
        for route in routes:
            fields = route.request.model_fields
            body = route.request.model_validate(
                {k: v for k, v in candidates.items() if k in fields}
            )
            data = body.model_dump_json().encode()
            for who in ("anonymous", "forged", *OUTSIDERS, "admin"):
                headers = (
                    bearer_headers("tth_forged") if who == "forged" else world.headers(who) or None
                )
                raw = await bus.request_raw(route.subject, data, headers=headers, timeout=30)
                reply = json.loads(raw)
                code = reply.get("error", {}).get("code") if isinstance(reply, dict) else None
                if who in ("anonymous", "forged") and code != "unauthenticated":
                    problems.append(f"{route.subject} as {who}: {code}")
                elif who in OUTSIDERS:
                    if world.mark_a.encode() in raw:
                        problems.append(f"{route.subject} as {who}: shows tenant A")
                    named = "run_id" in fields or "thread_id" in fields
                    if named and code not in ("not_found", "forbidden"):
                        problems.append(f"{route.subject} as {who}: {code}")
                elif who == "admin" and code in ("unauthenticated", "forbidden"):
                    problems.append(f"{route.subject} as admin: {code}")
    finally:
        await bus.close()
    assert not problems, "\n".join(problems)


async def test_a_route_without_authorisation_fails_the_table(world: World) -> None:
    """The checker itself: a route that answers anyone is reported."""
    app = FastAPI()

    @app.get("/v1/leaky/{run_id}")
    async def leaky(run_id: str) -> dict[str, str]:
        return {"run_id": run_id, "secret": world.mark_a}

    rows = rows_of("toy", app.openapi())
    assert rows == [Row("toy", "GET", "/v1/leaky/{run_id}")]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://toy") as http:

        async def send(
            service: str, method: str, path: str, headers: dict[str, str]
        ) -> httpx.Response:
            return await http.request(method, path, headers=headers)

        problems = await anonymous_problems(rows, world, send)
    assert len(problems) == 3


# The OpenAPI document itself: outside the document, for any valid token
# (`test_the_api_documents_need_a_token`).
DOCS = {"/openapi.json"}
# Public pages outside the document: the approvals console's and the runs console's
# static pages (they hold no data; they ask for a token, then use the authenticated API).
# The console's page (the approvals service's two addresses lead to the brain's).
PAGES = {"approvals": {"/", "/console"}, "brain": {"/console"}}
APPS = {
    "brain": ("tether_brain", "BrainSettings"),
    "output-store": ("tether_output_store", "OutputSettings"),
    "approvals": ("tether_approvals", "ApprovalSettings"),
}


def route_paths(routes: list[Any], prefix: str = "") -> set[str]:
    """Every route's path, through included routers (a router included into another takes
    the prefix it was included under: FastAPI keeps it on the include, not the routes)."""
    found: set[str] = set()
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            found |= route_paths(list(inner.routes), prefix + route.include_context.prefix)
        elif isinstance(getattr(route, "path", None), str):
            found.add(prefix + route.path)
    return found


@pytest.mark.parametrize("service", sorted(APPS))
def test_no_route_hides_from_the_table(
    service: str, stack: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table walks the OpenAPI document: every route of the app (built here from the
    stack's settings; building connects to nothing) is in it, or is FastAPI's docs."""
    for key, value in stack.env.items():
        monkeypatch.setenv(key, value)
    package, settings_class = APPS[service]
    app_module = importlib.import_module(f"{package}.app")
    settings = getattr(importlib.import_module(f"{package}.settings"), settings_class)()
    app = app_module.create_app(CommonSettings(), settings)
    documented = set(app.openapi()["paths"])
    assert route_paths(list(app.routes)) - documented <= DOCS | PAGES.get(service, set())
    assert documented - route_paths(list(app.routes)) == set()


# FastAPI's documentation pages (their scripts come from a CDN) and the document they read.
DOC_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


@pytest.mark.parametrize("service", [spec.name for spec in ALL_SERVICES])
async def test_the_api_documents_need_a_token(
    world: World, stack: Supervisor, service: str
) -> None:
    """Every service: no documentation page for anyone, the OpenAPI document for a valid
    token of any tenant or role, and for nobody else."""
    base = stack.child(service).url
    async with httpx.AsyncClient(timeout=30) as http:
        for path in DOC_PATHS:
            for headers in ({}, bearer("tth_not-a-token")):
                answer = await http.get(base + path, headers=headers)
                assert answer.status_code in (401, 404), (path, headers, answer.text[:200])
                assert "<script" not in answer.text
        for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert (await http.get(base + page, headers=world.headers("admin"))).status_code == 404
        for who in ("admin", "bob"):
            document = await http.get(base + "/openapi.json", headers=world.headers(who))
            assert document.status_code == 200, (who, document.text[:200])
            assert "/healthz" in document.json()["paths"]


# ---- agents per tenant: using one, `/v1/models` and the MCP tool list ----------------

# The agents the table names: the built-in default, tenant A's own, the default tenant's
# own (which writes without asking: issue 28.4's `rtw`), one an admin shared, and the
# settings' seed `privileged` (shared by the settings).
AGENT_KINDS = ("builtin", "own_a", "custom", "shared", "privileged")
# For each caller and agent: (starting a run of it, reading it). A run's 201 means the
# faces offer it too (`/v1/models`, `/v1/models/{id}`, the MCP tool list); anything else
# means they do not. 404s are word for word those for an id nobody has.
AGENT_TABLE: dict[str, dict[str, tuple[int, int]]] = {
    "opa": {
        "builtin": (201, 200),
        "own_a": (201, 200),
        "custom": (404, 404),
        "shared": (201, 200),
        "privileged": (201, 200),
    },
    "alice": {  # a client: the configured default agent only; reads no agents
        "builtin": (201, 403),
        "own_a": (403, 403),
        "custom": (404, 403),
        "shared": (403, 403),
        "privileged": (403, 403),
    },
    "opb": {
        "builtin": (201, 200),
        "own_a": (404, 404),
        "custom": (404, 404),
        "shared": (201, 200),
        "privileged": (201, 200),
    },
    "bob": {
        "builtin": (201, 403),
        "own_a": (404, 403),
        "custom": (404, 403),
        "shared": (403, 403),
        "privileged": (403, 403),
    },
    "admin": {  # of the default tenant: its runs are that tenant's, as anyone's
        "builtin": (201, 200),
        "own_a": (404, 200),
        "custom": (201, 200),
        "shared": (201, 200),
        "privileged": (201, 200),
    },
}


@pytest.fixture(scope="module")
async def agent_names(world: World) -> dict[str, str]:
    suffix = world.mark_a[-8:].lower()
    names = {
        "builtin": "default",
        "own_a": world.agent_a,
        "custom": f"rtw-{suffix}",
        "shared": f"shared-{suffix}",
        "privileged": PRIVILEGED,
    }
    async with httpx.AsyncClient(base_url=world.brain, timeout=30) as http:
        for kind, body in (
            ("custom", {"grants": ["file_write#noapproval"]}),
            ("shared", {"shared": True}),
        ):
            made = await http.post(
                "/v1/agents", json={"id": names[kind]} | body, headers=world.headers("admin")
            )
            assert made.status_code == 201, made.text
    return names


async def mcp_tools(world: World, who: str) -> set[str]:
    """The tool names the MCP face lists for `who` (one per agent it may run)."""
    http = create_mcp_http_client(headers=world.headers(who))
    async with (
        http,
        streamable_http_client(f"{world.brain}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return {tool.name for tool in (await session.list_tools()).tools}


def no_oracle(response: httpx.Response, ghost: httpx.Response, name: str) -> str | None:
    """Why a 404 for `name` differs from the one for an id nobody has (None: it does not)."""
    said, said_ghost = response.json()["error"], ghost.json()["error"]
    if ghost.status_code != 404 or said["code"] != said_ghost["code"]:
        return f"{response.status_code} {said} vs {ghost.status_code} {said_ghost}"
    if said["message"].replace(name, "?") != said_ghost["message"].replace("nobody0", "?"):
        return f"{said['message']!r} vs {said_ghost['message']!r}"
    return None


@pytest.mark.parametrize("who", sorted(AGENT_TABLE))
async def test_agents_serve_their_own_tenant_and_shared_ones_everyone(
    world: World, agent_names: dict[str, str], who: str
) -> None:
    problems: list[str] = []
    models_seen, tools_seen = set(), await mcp_tools(world, who)
    async with httpx.AsyncClient(
        base_url=world.brain, timeout=30, headers=world.headers(who)
    ) as http:
        models = await http.get("/v1/models")
        assert models.status_code == 200, models.text
        models_seen = {m["id"] for m in models.json()["data"]}
        for kind in AGENT_KINDS:
            name, (runs, reads) = agent_names[kind], AGENT_TABLE[who][kind]
            offered = runs == 201
            started = await http.post(
                "/v1/runs", json={"prompt": "hi", "agent": name, "max_steps": 1}
            )
            read = await http.get(f"/v1/agents/{name}")
            card = await http.get(f"/v1/models/{name}")
            got = (started.status_code, read.status_code)
            if got != (runs, reads):
                problems.append(f"{who} {kind}: run, read {got}, expected {(runs, reads)}")
            if (card.status_code == 200) != offered or (name in models_seen) != offered:
                problems.append(
                    f"{who} {kind}: /v1/models {card.status_code}, listed {not offered}"
                )
            if (name in tools_seen) != offered:
                problems.append(f"{who} {kind}: in the MCP tool list: {not offered}")
            for response, ghost_path, body in (
                (started, "/v1/runs", {"prompt": "hi", "agent": "nobody0", "max_steps": 1}),
                (read, "/v1/agents/nobody0", None),
                (card, "/v1/models/nobody0", None),
            ):
                if response.status_code == 404:
                    ghost = await http.request("POST" if body else "GET", ghost_path, json=body)
                    if (why := no_oracle(response, ghost, name)) is not None:
                        problems.append(f"{who} {kind} {ghost_path}: {why}")
    assert not problems, "\n".join(problems)
