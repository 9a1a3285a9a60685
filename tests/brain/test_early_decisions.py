"""Issue 15, fault 1: an automated approvals rule decides within milliseconds, before the
brain has committed the park. That early decision must still reach its run, exactly
once, whatever the order: the brain looks at the stored decision once the park is
committed, and the announced one and the stored one go through the same claim."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent
from tether_common.testing import call, event_data, say, write_script

pytestmark = pytest.mark.e2e

ALLOWED_TOOL = "convert_time"  # the org asks for it; a rule allows it at once
DENIED_TOOL = "current_time"  # the org asks for it; a rule denies it at once
CONVERT = {"time": "09:00", "from_timezone": "UTC", "to_timezone": "Asia/Tokyo"}
RUNS_EACH = 4


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    rules = [
        {"name": "auto-allow", "tool": ALLOWED_TOOL, "answer": "allow_once"},
        {"name": "auto-deny", "tool": DENIED_TOOL, "answer": "deny"},
    ]
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps({ALLOWED_TOOL: "confirm", DENIED_TOOL: "confirm"}),
        "TETHER_APPROVALS_RULES": json.dumps(rules),
    }


async def run_to_end(stack: Supervisor, model: str) -> tuple[str, list[RunEvent]]:
    """A run started and followed to its end (a stranded run fails the timeout)."""
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run("use the tool", provider="scripted", model=model)
        async with asyncio.timeout(30):
            events = [e async for e in client.events(accepted.run_id)]
        return (await client.get_run(accepted.run_id)).status, events


async def test_rule_decisions_reach_their_runs_once(stack: Supervisor, scripts_dir: Path) -> None:
    allowed = write_script(scripts_dir, [[call(ALLOWED_TOOL, **CONVERT)], say("converted")])
    denied = write_script(scripts_dir, [[call(DENIED_TOOL, timezone="UTC")], say("understood")])
    outcomes = await asyncio.gather(
        *(run_to_end(stack, allowed) for _ in range(RUNS_EACH)),
        *(run_to_end(stack, denied) for _ in range(RUNS_EACH)),
    )
    for index, (status, events) in enumerate(outcomes):
        tool, kind = (
            (ALLOWED_TOOL, "tool.approved") if index < RUNS_EACH else (DENIED_TOOL, "tool.denied")
        )
        assert status == "completed", events[-1].data
        asked = event_data(events, "tool.approval_needed")
        assert len(asked) == 1
        decided = [d for d in event_data(events, kind) if d.get("approval_id")]
        assert len(decided) == 1, decided  # the decision reached the run exactly once
        assert decided[0]["approval_id"] == asked[0]["approval_id"]
        assert decided[0]["by"].startswith("rule")
        results = [r for r in event_data(events, "tool.result") if r["name"] == tool]
        assert len(results) == 1
        if tool == ALLOWED_TOOL:
            assert results[0]["ok"] is True
            assert "Asia/Tokyo" in results[0]["content"]
        else:
            assert results[0]["error_code"] == "approval_denied"
