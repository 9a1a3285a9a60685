"""Finding runs again: listing them newest first, over HTTP, over NATS and with `tether
runs list` (filtered by status, paged back with `before`, a bad query refused with a
structured error), and `tether runs follow` printing a run's events again."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from shipped import as_client
from tether_client import TetherClient
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import ListRuns, RunAccepted
from tether_common.subjects import Subjects

pytestmark = pytest.mark.e2e
# The fixtures' operator token (tests/conftest.py): the bootstrap admin.
ADMIN = {"Authorization": "Bearer test-operator-token"}


async def finished_runs(client: TetherClient, count: int) -> list[RunAccepted]:
    """`count` runs started one after another, each followed to its end."""
    started = []
    for i in range(count):
        accepted = await client.start_run(f"what time is it in Tokyo? (listing {i})")
        async for _ in client.events(accepted.run_id):
            pass
        started.append(accepted)
    return started


async def test_runs_are_listed_newest_first_and_page_back(stack: Supervisor) -> None:
    async with TetherClient(stack.child("brain").url) as client:
        ours = [a.run_id for a in await finished_runs(client, 3)]
        newest = await client.list_runs(limit=500)
        listed = [r.run_id for r in newest.runs]
        assert [r for r in listed if r in ours] == ours[::-1]
        first = next(r for r in newest.runs if r.run_id == ours[-1])
        assert first.status == "completed"
        assert first.prompt.startswith("what time is it in Tokyo?")
        assert first.step >= 1
        page = await client.list_runs(before=first.created_at, limit=1)
        assert [r.run_id for r in page.runs] == [ours[1]]
        done = await client.list_runs(status="completed", limit=500)
        assert {r.status for r in done.runs} == {"completed"}
        assert set(ours) <= {r.run_id for r in done.runs}


async def test_the_same_listing_over_nats(stack: Supervisor) -> None:
    subjects = Subjects(stack.env["TETHER_SUBJECT_PREFIX"])
    async with TetherClient(stack.child("brain").url) as client:
        (run,) = await finished_runs(client, 1)
        over_http = await client.list_runs(limit=5)
    bus = await as_client(stack)  # as an API client connects
    try:
        over_nats = await bus.request(subjects.run_list, ListRuns(limit=5), headers=ADMIN)
    finally:
        await bus.close()
    assert over_nats.runs[0].run_id == run.run_id
    assert [r.run_id for r in over_nats.runs] == [r.run_id for r in over_http.runs]


async def test_a_bad_query_is_a_structured_422(stack: Supervisor) -> None:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=10) as http:
        for query in ({"limit": "0"}, {"status": "sleeping"}, {"before": "yesterday"}):
            response = await http.get("/v1/runs", params=query, headers=ADMIN)
            assert response.status_code == 422, query
            assert response.json()["error"]["code"] == "invalid_request"


@pytest.fixture
async def cli_run(
    stack: Supervisor, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> RunAccepted:
    """One finished run, and the CLI pointed at this stack's brain."""
    async with TetherClient(stack.child("brain").url) as client:
        (run,) = await finished_runs(client, 1)
    monkeypatch.setenv("TETHER_API_URL", stack.child("brain").url)
    capsys.readouterr()
    return run


async def test_tether_runs_list(cli_run: RunAccepted, capsys: pytest.CaptureFixture[str]) -> None:
    run = cli_run
    assert await asyncio.to_thread(main, ["runs", "list", "--limit", "3"]) == 0
    header, first, *_ = capsys.readouterr().out.splitlines()
    assert header.split() == ["RUN", "STATUS", "STEP", "CREATED", "PROMPT"]
    assert first.startswith(f"{run.run_id}  completed")
    assert "what time is it in Tokyo?" in first
    assert await asyncio.to_thread(main, ["runs", "list", "--status", "awaiting_agents"]) == 0
    out = capsys.readouterr().out
    assert "awaiting_agents" in out or out.strip() == "no runs with status awaiting_agents"


async def test_tether_runs_follow(cli_run: RunAccepted, capsys: pytest.CaptureFixture[str]) -> None:
    run = cli_run
    assert await asyncio.to_thread(main, ["runs", "follow", run.run_id]) == 0
    whole = capsys.readouterr().out
    assert "current_time" in whole
    assert "completed" in whole
    after_the_end = ["runs", "follow", run.run_id, "--after", "1000"]
    assert await asyncio.to_thread(main, after_the_end) == 0  # it completed
    assert "current_time" not in capsys.readouterr().out
