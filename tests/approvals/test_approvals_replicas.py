"""Nothing assumes one replica: two processes expire each request once, and a restart
while requests are parked loses nothing (the state is in PostgreSQL)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.testing import ApprovalsHarness
from tether_client.server.supervisor import Supervisor


async def test_two_sweepers_expire_each_request_once(
    approvals: ApprovalsHarness, approvals_processes: Supervisor, engine: AsyncEngine
) -> None:
    replica = approvals_processes.add_replica("approvals")
    await approvals_processes.start_child(replica)
    try:
        await approvals_processes.wait_ready(timeout=60, children=[replica])
        created = await asyncio.gather(*(approvals.create(expires_in_s=0.4) for _ in range(10)))
        for item in created:
            assert (await approvals.decided(item.approval_id)).decision == "expired"
        ids = [item.approval_id for item in created]
        async with engine.connect() as conn:
            counts = await conn.execute(
                text(
                    "SELECT approval_id, count(*) FROM approval_events"
                    " WHERE kind = 'expired' AND approval_id = ANY(:ids) GROUP BY approval_id"
                ),
                {"ids": ids},
            )
            assert sorted(counts.all()) == sorted((i, 1) for i in ids)
    finally:
        await approvals_processes.stop_child(replica)


async def test_parked_requests_survive_a_restart(
    approvals: ApprovalsHarness, approvals_processes: Supervisor
) -> None:
    parked = await approvals.create()
    child = approvals_processes.child("approvals")
    await approvals_processes.stop_child(child)
    await approvals_processes.start_child(child)
    await approvals_processes.wait_ready(timeout=60, children=[child])
    response = await approvals.decide(parked.approval_id, "allow_once")
    assert response.status_code == 200, response.text
    assert (await approvals.decided(parked.approval_id)).decision == "allow_once"
