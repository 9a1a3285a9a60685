"""NATS restarted mid-run (same port, same JetStream store): every run still ends, and
its history is whole."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.embedded import NatsServer
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import call, say, write_script

pytestmark = pytest.mark.e2e

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
History = Callable[[str], Awaitable[list[RunEvent]]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]

RUNS = 3
DOWN_S = 1.5  # long enough for every client to see the connection drop


@pytest.mark.timeout(180)
async def test_runs_survive_a_nats_restart_mid_run(
    chaos_nats: NatsServer,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
    chaos_logs: Path,
) -> None:
    model = write_script(
        chaos_scripts,
        [
            [call("current_time", timezone="UTC")],
            # The restart lands in this pause: the gateway is mid-stream to the brain.
            [{"pause_s": 3}, call("current_time", timezone="Asia/Tokyo")],
            say("done after the restart"),
        ],
    )
    run_ids = [await start_run(model) for _ in range(RUNS)]
    for run_id in run_ids:
        await wait_for(run_id, "tool.result")

    chaos_nats.stop()
    await asyncio.sleep(DOWN_S)
    chaos_nats.start()

    runs = [await settle(run_id) for run_id in run_ids]
    for service in ("brain", "gateway"):  # the strike really cut them off
        assert "nats disconnected" in (chaos_logs / f"{service}.log").read_text()
    for run in runs:
        assert run.status == "completed", (run.status, run.stop_reason)
        assert run.answer == "done after the restart"
        assert [s.kind for s in run.steps] == ["model", "tool", "model", "tool", "model"]
    for run_id in run_ids:
        events = await history(run_id)
        assert [e.kind for e in events].count("tool.result") == 2
