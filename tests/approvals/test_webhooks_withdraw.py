"""A run stopped while it waits for an operator takes its card back: through the real
services, the approval becomes `withdrawn`, the webhook receiver and the console hear of
it, and nobody can decide it any more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tether_approvals.testing import auth
from tether_approvals.testing.receiver import Receiver, receiver
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import call, say, write_script

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: an admin token
CONFIRMED_TOOL = "convert_time"
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}


@pytest.fixture(scope="module")
def database_url(own_database_url: str) -> str:
    """Its own database, not the folder's: its stack's brain must not adopt the runs
    other stacks of this folder left behind."""
    return own_database_url


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({CONFIRMED_TOOL: "confirm"}),
        "TETHER_APPROVALS_WEBHOOKS__POLL_S": "0.05",
        "TETHER_APPROVALS_WEBHOOKS__BACKOFF_S": "0.05",
        # The test's receiver listens on loopback, which the deployment must name.
        "TETHER_APPROVALS_WEBHOOKS__PRIVATE_HOSTS": json.dumps(["127.0.0.1"]),
    }


async def park(stack: Supervisor, scripts: Path) -> tuple[str, dict[str, Any]]:
    model = write_script(scripts, [[call(CONFIRMED_TOOL, **CONVERT)], say("converted")])
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("convert a time", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == "tool.approval_needed":
                return accepted.run_id, event.data
            assert event.kind != "run.end", event.data
    raise AssertionError("the run never asked")


async def withdraw_one(
    stack: Supervisor, scripts: Path, http: httpx.AsyncClient, found: Receiver
) -> str:
    """Park a run, stop it, and check its card is withdrawn everywhere; its approval id."""
    run_id, asked = await park(stack, scripts)
    approval_id: str = asked["approval_id"]
    await found.one(approval_id, "approval.requested")

    async with TetherClient(stack.child("brain").url) as client:
        await client.stop_run(run_id)
        ended = [e async for e in client.events(run_id) if e.kind == "run.end"]
        assert (await client.get_run(run_id)).status == "stopped", ended

    withdrawn = await found.one(approval_id, "approval.withdrawn")
    assert withdrawn.verified
    assert withdrawn.json["card"]["status"] == "withdrawn"
    assert withdrawn.json["card"]["run_id"] == run_id

    view = await http.get(f"/v1/approvals/{approval_id}", headers=auth(TOKEN))
    assert view.json()["status"] == "withdrawn"
    for decision in ("allow_once", "allow_run", "deny"):
        late = await http.post(
            f"/v1/approvals/{approval_id}/decision",
            json={"decision": decision},
            headers=auth(TOKEN),
        )
        assert late.status_code == 409, late.text
        assert late.json()["error"]["code"] == "withdrawn"
    return approval_id


async def test_a_stopped_run_withdraws_its_card(
    stack: Supervisor, scripts_dir: Path, database_url: str
) -> None:
    approvals_url = stack.child("approvals").url
    async with receiver() as found, httpx.AsyncClient(base_url=approvals_url, timeout=10) as http:
        created = await http.post("/v1/webhooks", json={"url": found.url}, headers=auth(TOKEN))
        assert created.status_code == 201, created.text
        found.secret = created.json()["secret"]
        endpoint_id = created.json()["endpoint"]["endpoint_id"]
        try:
            approval_id = await withdraw_one(stack, scripts_dir, http, found)
        finally:
            # The database outlives this module: a left endpoint would be sent every later
            # request of the session, at a port another test's receiver may get.
            gone = await http.delete(f"/v1/webhooks/{endpoint_id}", headers=auth(TOKEN))
            assert gone.status_code == 200, gone.text

    # The console's event stream has it (the same log SSE replays).
    conn = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        kinds = await conn.fetch(
            "SELECT kind FROM approval_events WHERE approval_id = $1 ORDER BY event_id",
            approval_id,
        )
    finally:
        await conn.close()
    assert [k["kind"] for k in kinds] == ["created", "withdrawn"]
