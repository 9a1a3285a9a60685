"""Tool servers per tenant through the real services (issue 31): tenant A adds its own
MCP server (a real streamable-HTTP server process with a token check) with its token as
a credential; A's run sees and calls its tool, the server receiving the token; tenant B
neither sees nor can call it, through the brain or straight to the runner. The token
never shows: not in any service's log, the run's events, the API's answers or the
console. A wrong token, a server that is down, and every SSRF variant are clear errors
that crash nothing."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from shipped import observe
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent
from tether_common.messages.tools import MCP_FAILED, Catalog, CatalogRequest, ExecuteTool
from tether_common.testing import call, say, until, write_script

OPERATOR_TOKEN = "test-operator-token"  # the suite's stacks' (tests/conftest.py)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SERVER = Path(__file__).parent / "token_mcp_server.py"
TOKEN = "tok-" + "9f3c1a7e5b2d4c6e8a0b1d3f5e7a9c1b"  # unique: any sighting is a leak
TOOL = "mcp.vault.secret_word"
DEADLINE_S = 60.0
WRONG = "Bearer wrong-" + TOKEN[::-1]  # a header the vault refuses


@dataclass(frozen=True, slots=True)
class Vault:
    port: int
    ledger: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


def _serve(ledger: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, str(SERVER), TOKEN, str(ledger), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Vault, Vault, int]]:
    """The vault, a server redirecting to the vault, and a port nobody listens on."""
    base = tmp_path_factory.mktemp("vault")
    vault_process, port = _serve(base / "vault.ledger")
    vault = Vault(port, base / "vault.ledger")
    moved_process, moved_port = _serve(base / "moved.ledger", "--redirect-to", vault.url)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = probe.getsockname()[1]
    try:
        yield vault, Vault(moved_port, base / "moved.ledger"), down
    finally:
        for process in (vault_process, moved_process):
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture(scope="module")
def stack_extra_env(servers: tuple[Vault, Vault, int]) -> dict[str, str]:
    vault, moved, down = servers
    allowed = [f"127.0.0.1:{p}" for p in (vault.port, moved.port, down)]
    return {
        # The operator's explicit allow-list: these loopback servers, no other.
        "TETHER_RUNNER_TOOL_SERVER_PRIVATE_HOSTS": json.dumps(allowed),
        "TETHER_RUNNER_MCP_MAX_ATTEMPTS": "2",
        "TETHER_RUNNER_MCP_CONNECT_TIMEOUT_S": "10",
        "TETHER_BRAIN_CATALOG_TTL_S": "0.5",
        # The tool reaches the instance: the allow-list grants it (to every tenant alike,
        # so only the tenant's own catalogue keeps B from it).
        "TETHER_BRAIN_ALLOWLIST": json.dumps([TOOL]),
    }


async def _token(stack: Supervisor, name: str, tenant: str) -> str:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=30) as http:
        made = await http.post(
            "/v1/tokens",
            json={"name": name, "role": "operator", "tenant": tenant},
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        )
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


@dataclass(frozen=True, slots=True)
class Tenants:
    a: str
    b: str


@pytest.fixture(scope="module")
async def tenants(stack: Supervisor) -> Tenants:
    return Tenants(await _token(stack, "ops-a", "ta"), await _token(stack, "ops-b", "tb"))


@pytest.fixture
async def api(stack: Supervisor) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=60) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def add(api: httpx.AsyncClient, who: str, **body: Any) -> httpx.Response:
    return await api.post("/v1/tool-servers", json=body, headers=bearer(who))


async def settled(api: httpx.AsyncClient, who: str, server_id: str) -> dict[str, Any]:
    """The server as listed once it is up or failed."""

    async def listed() -> dict[str, Any]:
        found = await api.get("/v1/tool-servers", headers=bearer(who))
        assert TOKEN not in found.text
        views = [s for s in found.json()["servers"] if s["server_id"] == server_id]
        assert views, found.text
        return dict(views[0])

    return await until(
        listed,
        done=lambda view: view["state"] != "connecting",
        timeout=DEADLINE_S,
        every=0.2,
        what=f"{server_id} settled",
    )


async def run_calling(
    stack: Supervisor, scripts: Path, who: str, tool: str
) -> tuple[str, list[RunEvent]]:
    model = write_script(scripts, [[call(tool)], say("done")])
    async with TetherClient(stack.child("brain").url, token=who) as client:
        run_id = (await client.start_run("the word", provider="scripted", model=model)).run_id
        async with asyncio.timeout(DEADLINE_S):
            return run_id, [e async for e in client.events(run_id)]


def result_of(events: list[RunEvent]) -> dict[str, Any]:
    return next(e.data for e in events if e.kind == "tool.result")


def assert_no_token_in_logs(stack: Supervisor) -> None:
    assert stack.log_dir is not None
    logs = sorted(stack.log_dir.glob("*"))
    assert logs, "the stack wrote no logs"
    for log_file in logs:
        assert TOKEN not in log_file.read_text(errors="replace"), log_file.name


async def test_a_tenants_server_is_its_own_and_its_token_never_shows(
    stack: Supervisor,
    scripts_dir: Path,
    tenants: Tenants,
    api: httpx.AsyncClient,
    servers: tuple[Vault, Vault, int],
) -> None:
    vault = servers[0]
    added = await add(
        api, tenants.a, name="vault", url=vault.url, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert added.status_code == 201, added.text
    assert TOKEN not in added.text
    assert added.json()["has_credentials"] is True
    server_id = added.json()["server_id"]
    view = await settled(api, tenants.a, server_id)
    assert view["state"] == "up", view
    assert TOOL in view["tools"], view

    # A's run sees and calls it; the server got the token (it answers nothing without).
    run_id, events = await run_calling(stack, scripts_dir, tenants.a, TOOL)
    assert result_of(events)["ok"] is True, result_of(events)
    assert "heliotrope" in json.dumps([e.data for e in events])
    assert "ok" in vault.lines()
    assert not any(TOKEN in line for line in vault.lines())

    # B: not listed, not in its catalogue, refused as unknown by the brain and the runner.
    listed = await api.get("/v1/tool-servers", headers=bearer(tenants.b))
    assert server_id not in listed.text
    assert "vault" not in listed.text
    _, b_events = await run_calling(stack, scripts_dir, tenants.b, TOOL)
    # Refused as a name never made is: the model is told which tools there are.
    guards = [e.data for e in b_events if e.kind == "guard"]
    assert {"kind": "unusable_call", "names": [TOOL]}.items() <= guards[0].items(), guards
    assert not [e for e in b_events if e.kind == "tool.result"]
    assert "heliotrope" not in json.dumps([e.data for e in b_events])
    bus = await observe(stack)
    try:
        for tenant, sees in (("ta", True), ("tb", False), (None, False)):
            catalog: Catalog = await bus.request(
                bus.subjects.tool_catalog, CatalogRequest(tenant=tenant), timeout=10
            )
            assert (TOOL in {t.name for t in catalog.tools}) is sees, tenant
        direct = ExecuteTool(run_id="run_x", call_id="c1", name=TOOL, args={}, tenant="tb")
        answer = await bus.request(bus.subjects.tool_execute, direct, timeout=30)
        assert answer.error_code == "unknown_tool", answer
    finally:
        await bus.close()

    # Never shown: the API, the events, the console's views of the run, any log.
    for events_seen in (events, b_events):
        assert TOKEN not in json.dumps([e.model_dump(mode="json") for e in events_seen])
    for path in ("/console", "/v1/runs", f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
        shown = await api.get(path, headers=bearer(tenants.a))
        assert TOKEN not in shown.text, path
    assert_no_token_in_logs(stack)

    removed = await api.delete(f"/v1/tool-servers/{server_id}", headers=bearer(tenants.b))
    assert removed.status_code == 404  # B cannot even see it to remove it


async def test_a_wrong_token_is_a_clear_error(
    stack: Supervisor, tenants: Tenants, api: httpx.AsyncClient, servers: tuple[Vault, Vault, int]
) -> None:
    vault = servers[0]
    wrong = WRONG
    added = await add(
        api, tenants.a, name="vault-bad", url=vault.url, headers={"Authorization": wrong}
    )
    assert added.status_code == 201, added.text
    view = await settled(api, tenants.a, added.json()["server_id"])
    assert view["state"] == "failed", view
    assert "401" in view["failure"], view
    assert f"refused {wrong}" in vault.lines()  # the server saw exactly the stored value
    assert wrong not in view["failure"]
    bus = await observe(stack)
    try:
        direct = ExecuteTool(
            run_id="run_y", call_id="c1", name="mcp.vault-bad.secret_word", args={}, tenant="ta"
        )
        answer = await bus.request(bus.subjects.tool_execute, direct, timeout=30)
        assert answer.error_code == MCP_FAILED, answer
        assert "401" in answer.content, answer
    finally:
        await bus.close()
    assert_no_token_in_logs(stack)


async def test_a_server_that_is_down_is_a_clear_error_and_crashes_nothing(
    stack: Supervisor, tenants: Tenants, api: httpx.AsyncClient, servers: tuple[Vault, Vault, int]
) -> None:
    down = servers[2]
    added = await add(
        api,
        tenants.a,
        name="gone",
        url=f"http://127.0.0.1:{down}/mcp",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert added.status_code == 201, added.text
    view = await settled(api, tenants.a, added.json()["server_id"])
    assert view["state"] == "failed", view
    assert "connect" in view["failure"].lower(), view
    async with httpx.AsyncClient(base_url=stack.child("tools-runner").url) as runner:
        assert (await runner.get("/readyz")).status_code == 200


@pytest.mark.parametrize(
    "where",
    [
        "http://127.0.0.1:{other}/mcp",
        "http://[::1]:{port}/mcp",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/mcp",
        "https://10.20.30.40/mcp",
        "http://localhost:{port}/mcp",
        "http://2130706433:{other}/mcp",  # 127.0.0.1 spelled as one number
        "http://example.com/mcp",  # plain http to a public host
    ],
)
async def test_ssrf_refused_when_added(
    tenants: Tenants, api: httpx.AsyncClient, servers: tuple[Vault, Vault, int], where: str
) -> None:
    vault = servers[0]
    url = where.format(port=vault.port, other=vault.port + 1)
    refused = await add(api, tenants.a, name="probe", url=url)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "tool_server_refused"


@pytest.mark.parametrize("case", ["name resolving to loopback", "redirect"])
async def test_ssrf_refused_when_dialled(
    tenants: Tenants, api: httpx.AsyncClient, servers: tuple[Vault, Vault, int], case: str
) -> None:
    """A name is judged on the address it resolves to at each request; a redirect off
    the server's origin is never followed, so the token never reaches where it points."""
    vault, moved, _ = servers
    if case == "redirect":
        url, name = moved.url, "moved"
    else:
        host = socket.gethostname()
        if not socket.gethostbyname(host).startswith("127."):
            pytest.skip(f"{host} does not resolve to loopback here")
        # https: plain http goes only to an allowed host, and this name is none.
        url, name = f"https://{host}:{vault.port}/mcp", "rebound"
    before = len(vault.lines())
    added = await add(
        api, tenants.a, name=name, url=url, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert added.status_code == 201, added.text
    view = await settled(api, tenants.a, added.json()["server_id"])
    assert view["state"] == "failed", view
    assert ("loopback" if case != "redirect" else "not followed") in view["failure"], view
    # The vault was never reached through it. (The wrong-token server of an earlier test
    # may still be retrying in the background: those lines carry its own header.)
    reached = [line for line in vault.lines()[before:] if not line.startswith(f"refused {WRONG}")]
    assert reached == []


async def test_only_an_admin_adds_a_stdio_or_shared_server(
    tenants: Tenants, api: httpx.AsyncClient
) -> None:
    stdio = await add(api, tenants.a, name="local", transport="stdio", command="/bin/true")
    assert stdio.status_code == 403, stdio.text
    shared = await add(api, tenants.a, name="everyone", url="https://mcp.example.com/", shared=True)
    assert shared.status_code == 403, shared.text
