"""PostgreSQL restarted mid-run (same port, same data): every run still ends, and its
history is whole. The outage outlasts the model's pause, so the brain's next commit
meets a database that is down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tether_client.server.embedded import EmbeddedPostgres
from tether_common.messages.runs import RunEvent, RunView
from tether_common.testing import Turn, call, say, write_script

pytestmark = pytest.mark.e2e

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
History = Callable[[str], Awaitable[list[RunEvent]]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]

RUNS = 3
DOWN_S = 4.0  # longer than the 2 s pause: a step's commit lands in the outage


def script() -> list[Turn]:
    return [
        [call("current_time", timezone="UTC")],
        [{"pause_s": 2}, call("current_time", timezone="Asia/Tokyo")],
        say("done after the database came back"),
    ]


async def strike_and_check(
    down: Callable[[], None],
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    model = write_script(chaos_scripts, script())
    run_ids = [await start_run(model) for _ in range(RUNS)]
    for run_id in run_ids:
        await wait_for(run_id, "tool.result")

    down()
    await asyncio.sleep(DOWN_S)
    await asyncio.to_thread(chaos_postgres.start)

    for run_id in run_ids:
        run = await settle(run_id)
        assert run.status == "completed", (run.status, run.stop_reason)
        assert run.answer == "done after the database came back"
        assert [s.kind for s in run.steps] == ["model", "tool", "model", "tool", "model"]
        events = await history(run_id)
        assert [e.kind for e in events].count("tool.result") == 2


@pytest.mark.timeout(180)
async def test_runs_survive_an_immediate_postgres_shutdown(
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    def down() -> None:
        chaos_postgres.stop(mode="immediate")

    await strike_and_check(
        down, chaos_postgres, chaos_scripts, start_run, wait_for, settle, history
    )


@pytest.mark.timeout(180)
async def test_runs_survive_a_killed_postmaster(
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    await strike_and_check(
        chaos_postgres.kill, chaos_postgres, chaos_scripts, start_run, wait_for, settle, history
    )
