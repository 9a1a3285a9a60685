"""NATS restarted mid-run (same port, same JetStream store): every run still ends, and
its history is whole; outputs kept in the JetStream object store (this module's
output-store backend) are still there afterwards, and new ones can be stored."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tether_client.server.embedded import NatsServer
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.outputs import QueryOutput
from tether_common.messages.runs import RunEvent, RunView
from tether_common.subjects import Subjects
from tether_common.testing import call, say, write_script
from tether_tools_runner.offload import upload

pytestmark = pytest.mark.e2e

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
History = Callable[[str], Awaitable[list[RunEvent]]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]
T = TypeVar("T")

RUNS = 3
DOWN_S = 1.5  # long enough for every client to see the connection drop


@pytest.fixture(scope="module")
def chaos_extra_env() -> dict[str, str]:
    return {"TETHER_OUTPUTS_BACKEND": "jetstream"}


async def when_served(ask: Callable[[], Awaitable[T]], timeout_s: float = 30) -> T:
    """`ask` retried while the services are still finding their way back to NATS."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return await ask()
        except TetherError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.25)


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


@pytest.mark.timeout(180)
async def test_object_store_outputs_survive_a_nats_restart(
    chaos_nats: NatsServer, chaos_stack: Supervisor
) -> None:
    prefix = chaos_stack.env["TETHER_SUBJECT_PREFIX"]
    bus = await Bus.connect(chaos_nats.url, service="test", subjects=Subjects(prefix))
    try:
        before = b"".join(f"before {i}\n".encode() for i in range(60_000))
        kept = await when_served(lambda: upload(bus, "run-chaos-outputs", before))

        chaos_nats.stop()
        await asyncio.sleep(DOWN_S)
        chaos_nats.start()

        ask = QueryOutput(ref=kept.ref, run_id="run-chaos-outputs", offset=59_999, limit=1)
        page = await when_served(lambda: bus.request(bus.subjects.output_query, ask))
        assert page.content == "before 59999\n"
        after = b"".join(f"after {i}\n".encode() for i in range(60_000))
        stored = await when_served(lambda: upload(bus, "run-chaos-outputs", after))
        assert stored.size == len(after)
    finally:
        await bus.close()
