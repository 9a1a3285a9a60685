"""The operator event stream (SSE, scoped, resumable) and operator presence."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.messages.approvals import Presence, PresenceQuery


@asynccontextmanager
async def event_stream(
    approvals: ApprovalsHarness, token: str, last_event_id: str | None = None
) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    """Read the SSE stream in the background into a queue while the body runs."""
    headers = auth(token) | ({"Last-Event-ID": last_event_id} if last_event_id else {})
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    opened = asyncio.Event()

    async def read() -> None:
        async with (
            httpx.AsyncClient(base_url=approvals.url, timeout=30) as client,
            client.stream("GET", "/v1/approvals/events", headers=headers) as response,
        ):
            assert response.status_code == 200
            opened.set()
            current: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line:
                    key, _, value = line.partition(":")
                    current[key] = value.strip()
                elif "data" in current:
                    await queue.put(current | {"data": json.loads(current["data"])})
                    current = {}

    reader = asyncio.create_task(read())
    try:
        await asyncio.wait_for(opened.wait(), 10)
        yield queue
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def next_for(queue: asyncio.Queue[dict[str, Any]], approval_id: str) -> dict[str, Any]:
    while True:
        event = await asyncio.wait_for(queue.get(), 10)
        if event["data"]["approval"]["approval_id"] == approval_id:
            return event


async def test_events_follow_the_lifecycle_and_resume(approvals: ApprovalsHarness) -> None:
    admin = await approvals.token("admin")
    async with event_stream(approvals, admin) as queue:
        created = await approvals.create()
        first = await next_for(queue, created.approval_id)
        assert first["event"] == "created"
        await approvals.decide(created.approval_id, "allow_once")
        second = await next_for(queue, created.approval_id)
        assert second["event"] == "decided"
        assert second["data"]["approval"]["status"] == "granted"
    async with event_stream(approvals, admin, last_event_id=first["id"]) as queue:
        resumed = await next_for(queue, created.approval_id)
        assert (resumed["id"], resumed["event"]) == (second["id"], "decided")


async def test_events_are_scoped_to_the_team(approvals: ApprovalsHarness) -> None:
    team_a = await approvals.token("viewer", owners=["ev-team-a"])
    async with event_stream(approvals, team_a) as queue:
        theirs = await approvals.create(owner="ev-team-b")
        mine = await approvals.create(owner="ev-team-a")
        event = await asyncio.wait_for(queue.get(), 10)
        assert event["data"]["approval"]["approval_id"] == mine.approval_id
        assert theirs.approval_id != mine.approval_id


async def presence(approvals: ApprovalsHarness, **scope: str) -> int:
    route = approvals.bus.subjects.approval_presence
    reply: Presence = await approvals.bus.request(route, PresenceQuery(**scope))
    return reply.approvers


async def eventually(check: Any, expected: int) -> None:
    for _ in range(100):
        if await check() == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {expected}")


async def test_presence_counts_connected_approvers_in_scope(approvals: ApprovalsHarness) -> None:
    approver = await approvals.token("approver", agents=["present-bot"])
    viewer = await approvals.token("viewer", agents=["present-bot"])
    assert await presence(approvals, agent="present-bot") == 0
    async with event_stream(approvals, viewer):
        await eventually(lambda: presence(approvals, agent="present-bot"), 0)
        async with event_stream(approvals, approver):
            await eventually(lambda: presence(approvals, agent="present-bot"), 1)
            assert await presence(approvals, agent="absent-bot") == 0
    await eventually(lambda: presence(approvals, agent="present-bot"), 0)
