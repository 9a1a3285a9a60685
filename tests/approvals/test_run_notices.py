"""Run notices through the real services: an endpoint that chose `run.completed`,
`run.failed` and `run.awaiting_approval` gets each of its tenant's runs' ends and parks,
signed like approval notices (checked by a local receiver), once each; a run that ends
while the approvals service is down is told once it is back (the brain's run events wait
on JetStream for its durable consumer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js.errors import NotFoundError

from dbkit import new_database
from shipped import observe
from tether_approvals.notices.runs import CONSUMER, FORMER_CONSUMER
from tether_approvals.testing.receiver import Delivery, Receiver, receiver
from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.testing import Turn, call, say, until, write_script

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


async def consumer(bus: Bus, durable: str) -> Any:
    js = bus.jetstream
    stream = await js.find_stream_name_by_subject(bus.subjects.run_events_all)
    return await js.consumer_info(stream, durable)


async def test_the_approvals_service_is_handed_only_the_events_that_make_notices(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """It once decoded and acknowledged every event of every step; the server now hands
    it the second copy the brain publishes of a notable event, and nothing else."""
    bus = await observe(stack)
    try:
        before = (await consumer(bus, CONSUMER)).delivered.consumer_seq
        steps = [[call("calculate", expression=f"{n}+1")] for n in range(3)]
        run_id = await run(stack, scripts_dir, [*steps, say("done")], until="run.end")
        async with TetherClient(stack.child("brain").url) as client:
            events = [e async for e in client.events(run_id)]
        assert len(events) > 6, events  # steps, calls, results, usage, the end
        handed = await until(
            lambda: consumer(bus, CONSUMER),
            timeout=30,
            what="the run's end handed to the approvals service",
            done=lambda info: info.delivered.consumer_seq > before,
        )
        await asyncio.sleep(0.5)  # anything else would have come with it
        assert (await consumer(bus, CONSUMER)).delivered.consumer_seq == before + 1, handed
    finally:
        await bus.close()


@pytest.mark.parametrize("acked", [5, 0])
async def test_the_consumer_takes_over_from_the_one_of_every_event(
    stack: Supervisor, scripts_dir: Path, acked: int
) -> None:
    """An approvals service upgraded from the consumer of every run event starts after the
    last event that one acknowledged (from the first, when it acknowledged none), and
    deletes it."""
    bus = await observe(stack)
    try:
        js = bus.jetstream
        stream = await js.find_stream_name_by_subject(bus.subjects.run_events_all)
        approvals = stack.child("approvals")
        await stack.stop_child(approvals)
        await js.delete_consumer(stream, CONSUMER)
        former = await js.pull_subscribe(bus.subjects.run_events_all, durable=FORMER_CONSUMER)
        if acked:
            for message in await former.fetch(acked, timeout=10):
                await message.ack()
        acknowledged = (await consumer(bus, FORMER_CONSUMER)).ack_floor.stream_seq
        assert (acknowledged >= acked) if acked else (acknowledged == 0)
        await former.unsubscribe()
        await stack.start_child(approvals)
        await stack.wait_ready(timeout=60, children=[approvals])
        taken = await until(
            lambda: consumer(bus, CONSUMER),
            timeout=30,
            what="the new consumer",
            ignoring=(NotFoundError,),
        )
        assert taken.config.opt_start_seq == acknowledged + 1
        with pytest.raises(NotFoundError):
            await consumer(bus, FORMER_CONSUMER)
    finally:
        await bus.close()
