"""The policy-replay tests' desk: what they do through a stack's own APIs (people with
groups, runs of a scripted model, approval decisions). Imported by name: pytest puts
`tests/` on the path."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.testing import Turn, write_script

OPERATOR_TOKEN = "test-operator-token"  # tests/conftest.py: an admin token
ADMIN = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Desk:
    """What the tests do through the stack's own APIs."""

    stack: Supervisor
    scripts: Path

    @property
    def brain(self) -> str:
        return self.stack.child("brain").url

    @property
    def admin(self) -> dict[str, str]:
        return ADMIN

    @property
    def approvals(self) -> str:
        return self.stack.child("approvals").url

    async def person(
        self, role: str, groups: list[str] | None = None, **more: Any
    ) -> tuple[str, str]:
        """A new principal (a fresh name) and its token, member of `groups`; `more`: the
        token's other fields (`tenant`, …)."""
        name = f"p-{uuid.uuid4().hex[:8]}"
        body: dict[str, Any] = {"name": name, "role": role, **more}
        if groups is not None:
            body["groups"] = groups
        async with httpx.AsyncClient(timeout=30) as http:
            made = await http.post(f"{self.brain}/v1/tokens", json=body, headers=ADMIN)
        assert made.status_code == 201, made.text
        return name, str(made.json()["token"])

    async def start(
        self, turns: list[Turn], agent: str, token: str = OPERATOR_TOKEN, max_steps: int = 6
    ) -> str:
        model = write_script(self.scripts, turns)
        async with TetherClient(self.brain, token=token) as client:
            accepted = await client.start_run(
                "do the task", provider="scripted", model=model, agent=agent, max_steps=max_steps
            )
        return accepted.run_id

    async def events(self, run_id: str) -> AsyncGenerator[dict[str, Any], None]:
        """The run's events as the SSE route sends them (`kind`, `data`), live, to its end
        (read here rather than through the client, whose reader is being reworked)."""
        async with (
            httpx.AsyncClient(base_url=self.brain, headers=ADMIN, timeout=None) as http,
            aconnect_sse(http, "GET", f"/v1/runs/{run_id}/events") as source,
        ):
            async for sse in source.aiter_sse():
                if not sse.data:
                    continue
                event = json.loads(sse.data)
                if "kind" not in event:
                    continue  # live text (`event: delta`), not a run event
                yield event
                if event["kind"] == "run.end":
                    return

    async def asked(self, run_id: str, nth: int = 1) -> dict[str, Any] | None:
        """The run's `nth` approval card, waiting for it (None: it ended before)."""
        async with aclosing(self.events(run_id)) as events:
            async for event in events:
                if event["kind"] == "tool.approval_needed":
                    nth -= 1
                    if nth == 0:
                        return dict(event["data"])
        return None

    async def decide(self, approval_id: str, decision: str, token: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(
                f"{self.approvals}/v1/approvals/{approval_id}/decision",
                json={"decision": decision},
                headers=bearer(token),
            )

    async def approval(self, approval_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=30) as http:
            found = await http.get(f"{self.approvals}/v1/approvals/{approval_id}", headers=ADMIN)
        assert found.status_code == 200, found.text
        return dict(found.json())

    async def finish(self, run_id: str) -> tuple[str, list[dict[str, Any]]]:
        """Follow the run to its end: its status and every event's `kind` and `data`."""
        events = [e async for e in self.events(run_id)]
        async with httpx.AsyncClient(timeout=30) as http:
            run = await http.get(f"{self.brain}/v1/runs/{run_id}", headers=ADMIN)
        return str(run.json()["status"]), events


def results(events: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    """The `tool.result` data of every call of `tool`, in order."""
    return [e["data"] for e in events if e["kind"] == "tool.result" and e["data"]["name"] == tool]
