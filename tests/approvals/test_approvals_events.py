"""The operator event stream (SSE, scoped, resumable) and operator presence, and the same
stream polled over the bus (`approvals.watch`, what the brain's console follows): scoped
the same way, keeping presence the same way, checking the token on every poll."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tether_approvals.testing import ApprovalsHarness, auth
from tether_common.errors import AuthError
from tether_common.messages.approvals import (
    ApprovalWatch,
    Presence,
    PresenceQuery,
    WatchApprovals,
)
from tether_common.testing import until


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


async def present(approvals: ApprovalsHarness, agent: str, expected: int) -> None:
    """Until `expected` approvers of `agent` are counted present."""
    await until(
        lambda: presence(approvals, agent=agent),
        done=lambda count: count == expected,
        timeout=15,
        what=f"{expected} approvers of {agent} present",
    )


async def test_presence_counts_connected_approvers_in_scope(approvals: ApprovalsHarness) -> None:
    approver = await approvals.token("approver", agents=["present-bot"])
    viewer = await approvals.token("viewer", agents=["present-bot"])
    assert await presence(approvals, agent="present-bot") == 0
    async with event_stream(approvals, viewer):
        await present(approvals, "present-bot", 0)
        async with event_stream(approvals, approver):
            await present(approvals, "present-bot", 1)
            assert await presence(approvals, agent="absent-bot") == 0
    await present(approvals, "present-bot", 0)


async def watch(approvals: ApprovalsHarness, **fields: Any) -> ApprovalWatch:
    route = approvals.bus.subjects.approval_watch
    reply: ApprovalWatch = await approvals.bus.request(route, WatchApprovals(**fields))
    return reply


async def watched(approvals: ApprovalsHarness, token: str, after: int, wanted: str) -> list[str]:
    """The approval ids of the events polled past `after` until one names `wanted` (in
    one session, left at the end)."""
    seen: list[str] = []
    session = None

    async def poll() -> list[str]:
        nonlocal after, session
        reply = await watch(approvals, token=token, after=after, session_id=session)
        seen.extend(e.approval.approval_id for e in reply.events)
        after, session = reply.last_event_id, reply.session_id
        return seen

    try:
        return await until(poll, done=lambda ids: wanted in ids, timeout=15, what=wanted)
    finally:
        if session is not None:
            await watch(approvals, token=token, session_id=session, leave=True)


async def test_watch_polls_the_lifecycle_from_now_on(approvals: ApprovalsHarness) -> None:
    admin = await approvals.token("admin")
    first = await watch(approvals, token=admin)
    assert first.events == []  # no Last-Event-ID: from now on
    assert first.session_id is not None
    created = await approvals.create()
    await approvals.decide(created.approval_id, "allow_once")
    reply = await watch(
        approvals, token=admin, after=first.last_event_id, session_id=first.session_id
    )
    kinds = [(e.kind, e.approval.approval_id) for e in reply.events]
    assert ("created", created.approval_id) in kinds
    assert ("decided", created.approval_id) in kinds
    assert reply.last_event_id > first.last_event_id
    await watch(approvals, token=admin, session_id=first.session_id, leave=True)


@pytest.mark.parametrize(
    ("scope", "mine", "theirs"),
    [
        ({"owners": ["wa-team-a"]}, {"owner": "wa-team-a"}, {"owner": "wa-team-b"}),
        ({"agents": ["wa-bot-a"]}, {"agent": "wa-bot-a"}, {"agent": "wa-bot-b"}),
        ({"tenant": "wa-tenant-a"}, {"tenant": "wa-tenant-a"}, {"tenant": "wa-tenant-b"}),
        ({"tenant": "wa-tenant-a"}, {"tenant": "wa-tenant-a"}, {}),  # the default tenant's
    ],
    ids=["team-owners", "team-agents", "tenant", "default-tenant"],
)
async def test_watch_shows_only_what_the_token_may_read(
    approvals: ApprovalsHarness, scope: dict[str, Any], mine: dict[str, str], theirs: dict[str, str]
) -> None:
    token = await approvals.token("viewer", **scope)
    first = await watch(approvals, token=token)
    await watch(approvals, token=token, session_id=first.session_id, leave=True)
    after = first.last_event_id
    other = await approvals.create(**theirs)
    own = await approvals.create(**mine)
    assert await watched(approvals, token, after, own.approval_id) == [own.approval_id]
    assert other.approval_id != own.approval_id


async def test_watch_keeps_presence_and_only_its_own(approvals: ApprovalsHarness) -> None:
    approver = await approvals.token("approver", agents=["watch-bot"])
    stranger = await approvals.token("approver", agents=["elsewhere-bot"])
    assert await presence(approvals, agent="watch-bot") == 0
    joined = await watch(approvals, token=approver)
    assert joined.session_id is not None
    await present(approvals, "watch-bot", 1)
    # Another principal that learns the id can neither end nor adopt the session.
    await watch(approvals, token=stranger, session_id=joined.session_id, leave=True)
    assert await presence(approvals, agent="watch-bot") == 1
    adopted = await watch(approvals, token=stranger, session_id=joined.session_id, beat=True)
    assert adopted.session_id != joined.session_id  # a session of its own instead
    await watch(approvals, token=stranger, session_id=adopted.session_id, leave=True)
    # Beats keep it past the time-to-live (3 s in these tests); leaving ends it at once.
    session = joined.session_id
    for _ in range(5):
        await asyncio.sleep(joined.heartbeat_s)
        beat = await watch(approvals, token=approver, session_id=session, beat=True)
        assert beat.session_id == session
    assert await presence(approvals, agent="watch-bot") == 1
    await watch(approvals, token=approver, session_id=session, leave=True)
    assert await presence(approvals, agent="watch-bot") == 0


async def test_watch_checks_the_token_on_every_poll(approvals: ApprovalsHarness) -> None:
    admin = auth(approvals.admin_token)
    made = await approvals.http.post(
        "/v1/tokens", json={"name": "watch-revoked", "role": "viewer"}, headers=admin
    )
    assert made.status_code == 201, made.text
    token, token_id = made.json()["token"], made.json()["info"]["token_id"]
    first = await watch(approvals, token=token)
    revoked = await approvals.http.delete(f"/v1/tokens/{token_id}", headers=admin)
    assert revoked.status_code == 200, revoked.text
    assert await refused(approvals, token, first.last_event_id) == "unauthenticated"
    assert await refused(approvals, "not-a-token", None) == "unauthenticated"
    client = await approvals.token("client")  # a role that may not read approvals
    assert await refused(approvals, client, None) == "forbidden"


async def refused(approvals: ApprovalsHarness, token: str, after: int | None) -> str:
    """The code of the refusal a poll meets within the verification cache's 2 s."""

    async def refusal() -> str | None:
        try:
            await watch(approvals, token=token, after=after)
        except AuthError as exc:
            return exc.code
        return None

    return await until(refusal, timeout=15, what="a poll refused")
