"""One real run across all five services: brain → gateway (rules) → tools-runner →
PostgreSQL, with events on NATS and as Server-Sent Events."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import httpx
import pytest

from tether_client.server.supervisor import Supervisor

pytestmark = pytest.mark.e2e
# The fixtures' operator token (tests/conftest.py): the bootstrap admin.
ADMIN = {"Authorization": "Bearer test-operator-token"}


async def read_sse(
    client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with client.stream("GET", url, headers=headers or {}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        current: dict[str, str] = {}
        async for line in response.aiter_lines():
            if not line:
                # Live text (`event: delta`, no id) is not a durable event: tests/live.
                if "data" in current and current.get("event") != "delta":
                    events.append(
                        {
                            "id": current.get("id"),
                            "event": current.get("event"),
                            "data": json.loads(current["data"]),
                        }
                    )
                    if current.get("event") == "run.end":
                        break
                current = {}
                continue
            key, _, value = line.partition(":")
            current[key] = value.strip()
    return events


async def test_time_in_tokyo_crosses_every_service(stack: Supervisor, database_url: str) -> None:
    brain = stack.child("brain").url
    async with httpx.AsyncClient(headers=ADMIN, timeout=30) as client:
        created = await client.post(
            f"{brain}/v1/runs", json={"prompt": "what time is it in Tokyo?"}
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]

        events = await read_sse(client, f"{brain}/v1/runs/{run_id}/events")
        kinds = [e["event"] for e in events]
        assert kinds[0] == "run.start"
        assert kinds[-1] == "run.end"
        for needed in ("step", "tool.call", "tool.result"):
            assert needed in kinds
        call = next(e for e in events if e["event"] == "tool.call")["data"]
        assert call["data"]["name"] == "current_time"
        assert call["data"]["arguments"] == {"timezone": "Asia/Tokyo"}
        result = next(e for e in events if e["event"] == "tool.result")["data"]["data"]
        assert result["ok"] is True
        assert "Asia/Tokyo" in result["content"]
        assert [int(e["id"]) for e in events] == list(range(1, len(events) + 1))

        run = (await client.get(f"{brain}/v1/runs/{run_id}")).json()
        assert run["status"] == "completed"
        assert "Asia/Tokyo" in run["answer"]
        assert "not a language model" in run["answer"]
        assert [s["kind"] for s in run["steps"]] == ["model", "tool", "model"]

        resumed = await read_sse(
            client, f"{brain}/v1/runs/{run_id}/events", headers={"Last-Event-ID": "3"}
        )
        assert [int(e["id"]) for e in resumed] == list(range(4, len(events) + 1))

    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        row = await conn.fetchrow("SELECT status, step FROM runs WHERE run_id = $1", run_id)
        kinds_stored = await conn.fetch(
            "SELECT kind FROM run_journal WHERE run_id = $1 ORDER BY seq", run_id
        )
    finally:
        await conn.close()
    assert row is not None
    assert row["status"] == "completed"
    assert row["step"] == 2
    assert sum(1 for k in kinds_stored if k["kind"] == "message") == 4


async def test_unknown_run_is_a_structured_404(stack: Supervisor) -> None:
    async with httpx.AsyncClient(headers=ADMIN, timeout=10) as client:
        response = await client.get(f"{stack.child('brain').url}/v1/runs/run_missing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_bad_http_body_is_a_structured_422(stack: Supervisor) -> None:
    async with httpx.AsyncClient(headers=ADMIN, timeout=10) as client:
        response = await client.post(f"{stack.child('brain').url}/v1/runs", json={"prompt": ""})
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"
        response = await client.post(
            f"{stack.child('brain').url}/v1/runs",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 422
        assert "error" in response.json()
