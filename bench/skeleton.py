"""One skeleton step through the real services: brain → gateway (scripted) →
tools-runner → PostgreSQL commit, with every event published. Each run is 20 steps of
`current_time` calls and an answer; a step's cost is the time between consecutive steps."""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tether_client import TetherClient

STEPS_PER_RUN = 20
# One zone per step: a call made again would be answered from the run's cache, and the
# brain's finish-don't-loop guard would end the run.
ZONES = [
    "UTC",
    "Asia/Tokyo",
    "Europe/Paris",
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Australia/Sydney",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "Asia/Shanghai",
    "Asia/Dubai",
    "Africa/Cairo",
    "America/Sao_Paulo",
    "Europe/Madrid",
    "Asia/Singapore",
    "Pacific/Auckland",
    "Europe/Rome",
]


def write_script(scripts: Path) -> str:
    turns = [
        [
            {
                "kind": "tool_call",
                "id": f"c{i}",
                "name": "current_time",
                "arguments": {"timezone": ZONES[i]},
            }
        ]
        for i in range(STEPS_PER_RUN - 1)
    ]
    turns.append([{"kind": "chunk", "text": "done"}])
    (scripts / "bench-steps.json").write_text(json.dumps({"turns": turns}))
    return "bench-steps"


async def measure_steps(api_url: str, scripts: Path, runs: int) -> list[float]:
    model = write_script(scripts)
    samples: list[float] = []
    async with TetherClient(api_url) as client:
        for _ in range(runs):
            accepted = await client.start_run(
                "bench", provider="scripted", model=model, max_steps=STEPS_PER_RUN
            )
            marks: list[datetime] = []
            async for event in client.events(accepted.run_id):
                if event.kind == "step":
                    marks.append(event.ts)
                if event.kind == "run.end":
                    assert event.data["status"] == "completed", event.data
            samples += [(b - a).total_seconds() * 1000 for a, b in pairwise(marks)]
    return samples
