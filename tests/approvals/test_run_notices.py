"""Run notices through the real services: an endpoint that chose `run.completed`,
`run.failed` and `run.awaiting_approval` gets each of its tenant's runs' ends and parks,
signed like approval notices (checked by a local receiver), once each; a run that ends
while the approvals service is down is told once it is back (the brain's run events wait
on JetStream for its durable consumer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from dbkit import new_database
from tether_approvals.testing.receiver import Delivery, Receiver, receiver
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import Turn, call, say, write_script

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: an admin token
PARKED_TOOL = "convert_time"
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
KINDS = ["run.completed", "run.failed", "run.awaiting_approval"]


@pytest.fixture(scope="module")
async def database_url(pg_server_url: str, database_template: str) -> str:
    """This module's own database: on this folder's shared one, the approvals process of
    the other modules would send this module's deliveries too (to a host it may not)."""
    return await new_database(pg_server_url, "run_notices", template=database_template)


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({PARKED_TOOL: "confirm"}),
        "TETHER_APPROVALS_WEBHOOKS__POLL_S": "0.1",
        # The receiver listens on loopback: the deployment names that host.
        "TETHER_APPROVALS_WEBHOOKS__PRIVATE_HOSTS": json.dumps(["127.0.0.1"]),
    }


async def subscribe(stack: Supervisor, found: Receiver, events: list[str]) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{stack.child('approvals').url}/v1/webhooks",
            json={"url": found.url, "events": events},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 201, response.text
    found.secret = response.json()["secret"]


async def run(stack: Supervisor, scripts: Path, turns: list[Turn], *, until: str) -> str:
    """Start a run and follow it until an event of kind `until`; its id."""
    model = write_script(scripts, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("a task", provider="scripted", model=model)
        async for event in client.events(accepted.run_id):
            if event.kind == until:
                return accepted.run_id
    raise AssertionError(f"run {accepted.run_id} ended without {until}")


async def told(found: Receiver, run_id: str, kind: str) -> Delivery:
    await found.wait_for(lambda _: bool(found.of_run(run_id, kind)), timeout=60)
    return found.of_run(run_id, kind)[0]


def card(delivery: Delivery) -> dict[str, Any]:
    body = delivery.json
    assert body["kind"] == delivery.event
    assert body["notice_id"] == delivery.delivery_id
    run: dict[str, Any] = body["run"]
    return run


async def test_run_ends_and_parks_are_told_signed_once_each_across_a_restart(
    stack: Supervisor, scripts_dir: Path
) -> None:
    async with receiver() as found:
        await subscribe(stack, found, KINDS)
        completed = await run(stack, scripts_dir, [say("done")], until="run.end")
        assert card(await told(found, completed, "run.completed"))["answer"] == "done"

        # The approvals service is down while a run fails (its script has no turn).
        approvals = stack.child("approvals")
        await stack.stop_child(approvals)
        failed = await run(stack, scripts_dir, [], until="run.end")
        await stack.start_child(approvals)
        await stack.wait_ready(timeout=60, children=[approvals])
        failure = card(await told(found, failed, "run.failed"))
        assert failure["status"] == "failed"

        parked = await run(
            stack,
            scripts_dir,
            [[call(PARKED_TOOL, **CONVERT)], say("converted")],
            until="tool.approval_needed",
        )
        waiting = card(await told(found, parked, "run.awaiting_approval"))
        assert (waiting["status"], waiting["tool"]) == ("awaiting_approval", PARKED_TOOL)
        assert waiting["approval_id"].startswith("apr_")
        assert waiting["view"].endswith(waiting["approval_id"])

        mine = [found.of_run(r) for r in (completed, failed, parked)]
        for deliveries in mine:
            assert all(d.verified for d in deliveries), found.described()
            assert len(deliveries) == 1, found.described()
        # Nothing it did not choose: the endpoint hears no approval notices.
        assert all(d.event in KINDS for d in found.seen), found.described()
