"""Helpers of the threads tests (tests/threads/): the admin's headers and following a run's events."""

from __future__ import annotations

import json
from typing import Any

import httpx

ADMIN = {"Authorization": "Bearer test-operator-token"}  # tests/conftest.py OPERATOR_TOKEN
GUARDED = "file_write"  # needs a grant (it writes): asks an operator, never a hard denial
DEADLINE_S = 240.0  # a loaded CI machine restarting a brain takes its time


async def run_events(
    http: httpx.AsyncClient, run_id: str, until: frozenset[str] = frozenset({"run.end"})
) -> list[tuple[str, dict[str, Any]]]:
    """The run's durable events (kind, data) up to the first of `until` (deltas skipped)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    path = f"/v1/runs/{run_id}/events"
    async with http.stream("GET", path, headers=ADMIN, timeout=None) as response:
        assert response.status_code == 200, await response.aread()
        kind = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ").strip()
            elif line.startswith("data: ") and kind is not None and kind != "delta":
                seen.append((kind, json.loads(line.removeprefix("data: "))["data"]))
                if kind in until:
                    return seen
    raise AssertionError(f"the event stream of {run_id} ended before {sorted(until)}: {seen}")
