"""Issue 15, faults 2 to 5, each through the real services: a run ends once even when
publishing its end fails; a freshly started brain replica recovers calls in flight
knowing what each tool is; a short gateway or runner outage makes a run wait (and say
so) instead of failing it; a call no runner received is sent again, never reported as
of unknown outcome."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tether_client import TetherClient
from tether_client.server.embedded import EmbeddedPostgres, NatsServer
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.runs import RunEvent, RunView
from tether_common.subjects import Subjects
from tether_common.testing import call, say, until, write_script

pytestmark = pytest.mark.e2e

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]

SERVER = Path(__file__).parent / "chaos_mcp_server.py"
# Longer than the old give-up (two no-responders graces, about 4.5 s) and than any
# outage below, far shorter than the 30 s default.
SERVICE_WAIT_S = 15.0
OUTAGE_S = 2.0  # a service held down this long after the run says it waits
HEARTBEAT_S = 0.5  # the runner's beat while a call runs; three missed: the call is lost


@pytest.fixture(scope="module")
def ledger(chaos_logs: Path) -> Path:
    return chaos_logs.parent / "mcp-ledger.txt"


@pytest.fixture(scope="module")
def chaos_extra_env(ledger: Path) -> dict[str, str]:
    server = {"name": "chaos", "command": sys.executable, "args": [str(SERVER), str(ledger)]}
    return {
        "TETHER_RUNNER_MCP_SERVERS": json.dumps([server]),
        # The catalogue is kept across an outage (a refresh that meets a dead runner
        # spends seconds retrying before the call is even sent).
        "TETHER_BRAIN_CATALOG_TTL_S": "15",
        "TETHER_BRAIN_SERVICE_WAIT_S": str(SERVICE_WAIT_S),
        # Longer than a settle: a dead runner must be noticed by its missed heartbeats.
        "TETHER_BRAIN_TOOL_TIMEOUT_S": "90",
        "TETHER_BRAIN_TOOL_HEARTBEAT_S": str(HEARTBEAT_S),
        "TETHER_BRAIN_ALLOWLIST": json.dumps(
            ["mcp.chaos.slow_read", "mcp.chaos.slow_write", "file_write"]
        ),
    }


def started(ledger: Path, kind: str) -> int:
    return ledger.read_text().splitlines().count(kind) if ledger.exists() else 0


async def mcp_offered(stack: Supervisor) -> None:
    wanted = {"mcp.chaos.slow_read", "mcp.chaos.slow_write"}
    async with TetherClient(stack.child("brain").url) as client:

        async def offered() -> bool:
            return wanted <= {t.name for t in await client.tools() if t.available}

        await until(offered, timeout=45, every=0.2, what="the MCP tools offered")


async def journal(postgres: EmbeddedPostgres, run_id: str) -> list[dict[str, Any]]:
    """The run's events as journalled (the stream may be the thing that failed)."""
    conn = await asyncpg.connect(postgres.url)
    try:
        rows = await conn.fetch(
            "SELECT data FROM run_journal WHERE run_id = $1 AND kind = 'event' ORDER BY seq",
            run_id,
        )
    finally:
        await conn.close()
    return [json.loads(r["data"]) if isinstance(r["data"], str) else r["data"] for r in rows]


def of_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["kind"] == kind]


def waits(events: list[dict[str, Any]], service: str) -> list[dict[str, Any]]:
    return [
        g
        for g in of_kind(events, "guard")
        if g.get("kind") == "waiting" and g["service"] == service
    ]


async def outage(
    stack: Supervisor, logs: Path, name: str, during: Callable[[], Awaitable[str]], said: str
) -> str:
    """Hold `name` down (no restart) while `during` starts a run, until the brain logs
    that the run waits (`said`) and OUTAGE_S more; then start it again. The run id."""
    child = stack.child(name)
    await stack.stop_child(child)
    try:
        run_id = await during()
        brain_log = logs / "brain.log"
        line = f"run {run_id} {said}"
        await until(lambda: line in brain_log.read_text(errors="replace"), timeout=40, what=line)
        await asyncio.sleep(OUTAGE_S)
    finally:
        await stack.start_child(child)
    await stack.wait_ready(timeout=30, children=[child])
    return run_id


# ---- fault 2: a committed end is final ------------------------------------------


@pytest.mark.timeout(120)
async def test_a_failed_publish_after_the_end_never_ends_the_run_again(
    chaos_stack: Supervisor,
    chaos_nats: NatsServer,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
) -> None:
    """The run-events stream is taken away while the model writes its answer: the
    completing commit succeeds, its publish fails. The journal holds one `run.end`,
    `completed`, with the answer; the events reach the stream once it is back."""
    subjects = Subjects(chaos_stack.env["TETHER_SUBJECT_PREFIX"])
    stream = subjects.streams[0].name
    assert stream.endswith("_RUN_EVENTS")
    model = write_script(
        chaos_scripts,
        [[call("current_time", timezone="UTC")], [{"pause_s": 2}, *say("the answer that stays")]],
    )
    async with await Bus.connect(chaos_nats.url, service="test", subjects=subjects) as bus:
        run_id = await start_run(model)
        await wait_for(run_id, "tool.result")  # the last model turn is under way (2 s)
        await bus._nc.jetstream().delete_stream(stream)
        try:
            run = await settle(run_id)
            await asyncio.sleep(1.0)  # a second end, if any, would be committed by now
        finally:
            await bus.ensure_streams()
    events = await journal(chaos_postgres, run_id)
    ends = of_kind(events, "run.end")
    assert [e["status"] for e in ends] == ["completed"], [
        (e["status"], e["stop_reason"]) for e in ends
    ]
    assert (run.status, run.answer) == ("completed", "the answer that stays")
    # Published in the background once the stream is back (ids deduplicate).
    async with TetherClient(chaos_stack.child("brain").url) as client:
        async with asyncio.timeout(30):
            streamed = [e async for e in client.events(run_id)]
    assert [e.kind for e in streamed].count("run.end") == 1


# ---- fault 3: recovery on a fresh replica knows its tools ------------------------


@pytest.mark.timeout(120)
async def test_a_fresh_replica_reruns_the_read_and_learns_the_write(
    chaos_stack: Supervisor,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    ledger: Path,
    start_run: StartRun,
    settle: Settle,
) -> None:
    """One step calls a slow read and a slow write (the write makes the step's intent
    durable before either runs); the only brain is SIGKILLed while both run, and its
    restarted process (no catalogue yet) takes the run over: the read is run again, the
    write is sent again with its idempotency key (item 7), and the runner answers its
    recorded outcome instead of running it twice: no in-doubt card."""
    await mcp_offered(chaos_stack)
    model = write_script(
        chaos_scripts,
        [
            [call("mcp.chaos.slow_read", seconds=3.0), call("mcp.chaos.slow_write", seconds=3.0)],
            say("finished after the takeover"),
        ],
    )
    reads, writes = started(ledger, "read"), started(ledger, "write")
    run_id = await start_run(model, prompt="run the slow tools")
    await until(
        lambda: started(ledger, "read") > reads and started(ledger, "write") > writes,
        timeout=20,
        what="a read and a write started",
    )
    brain = chaos_stack.child("brain")
    restarts = brain.restarts
    chaos_stack.kill("brain")
    await until(lambda: brain.restarts > restarts, timeout=20, what="the brain restarted")
    await chaos_stack.wait_ready(timeout=30, children=[brain])
    run = await settle(run_id)
    events = await journal(chaos_postgres, run_id)
    assert not of_kind(events, "tool.approval_needed"), of_kind(events, "tool.approval_needed")
    assert (run.status, run.answer) == ("completed", "finished after the takeover"), run
    results = {r["name"]: r for r in of_kind(events, "tool.result")}
    assert results["mcp.chaos.slow_read"]["ok"] is True, results  # run again
    assert results["mcp.chaos.slow_write"]["ok"] is True, results  # its recorded outcome
    assert started(ledger, "read") == reads + 2
    assert started(ledger, "write") == writes + 1  # never run twice


# ---- fault 4: a gateway restart is waited for --------------------------------------


@pytest.mark.timeout(120)
async def test_a_model_turn_waits_for_a_restarting_gateway(
    chaos_stack: Supervisor,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    chaos_logs: Path,
    start_run: StartRun,
    settle: Settle,
) -> None:
    model = write_script(
        chaos_scripts,
        [[call("current_time", timezone="UTC")], say("answered after the restart")],
    )
    run_id = await outage(
        chaos_stack, chaos_logs, "gateway", lambda: start_run(model), "waits for a gateway"
    )
    run = await settle(run_id)
    assert (run.status, run.answer) == ("completed", "answered after the restart"), run
    events = await journal(chaos_postgres, run_id)
    assert len(waits(events, "gateway")) == 1  # said once, not per retry
    assert waits(events, "gateway")[0]["wait_s"] == SERVICE_WAIT_S


# ---- fault 5: a call nobody received is sent again ---------------------------------


@pytest.mark.timeout(120)
async def test_an_undelivered_write_is_sent_again_not_in_doubt(
    chaos_stack: Supervisor,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    chaos_logs: Path,
    start_run: StartRun,
    settle: Settle,
) -> None:
    await mcp_offered(chaos_stack)  # the brain knows the catalogue before the outage
    name = f"undelivered-{uuid.uuid4().hex[:8]}.txt"
    model = write_script(
        chaos_scripts,
        [[call("file_write", path=name, content="written once")], say("wrote it")],
    )
    run_id = await outage(
        chaos_stack, chaos_logs, "tools-runner", lambda: start_run(model), "waits for a runner"
    )
    run = await settle(run_id)
    events = await journal(chaos_postgres, run_id)
    results = of_kind(events, "tool.result")
    assert [(r["ok"], r["error_code"]) for r in results] == [(True, None)], results
    assert run.status == "completed", (run.status, run.stop_reason)
    assert (chaos_logs.parent / "workspace" / name).read_text() == "written once"
    assert len(waits(events, "tools-runner")) == 1


@pytest.mark.timeout(120)
async def test_a_runner_dying_mid_call_is_noticed_by_its_missed_heartbeats(
    chaos_stack: Supervisor,
    chaos_postgres: EmbeddedPostgres,
    chaos_scripts: Path,
    ledger: Path,
    start_run: StartRun,
    settle: Settle,
) -> None:
    """The runner is SIGKILLed while a write that takes 60 s runs (the tool timeout is
    90 s). The run ends within a settle (30 s) only because the brain stops
    waiting after three missed beats; the write, of unknown outcome, is reported
    interrupted and not run again."""
    await mcp_offered(chaos_stack)
    model = write_script(
        chaos_scripts,
        [[call("mcp.chaos.slow_write", seconds=60.0)], say("told it was interrupted")],
    )
    writes = started(ledger, "write")
    run_id = await start_run(model, prompt="run the slow tool")
    await until(lambda: started(ledger, "write") > writes, timeout=20, what="a write started")
    runner = chaos_stack.child("tools-runner")
    restarts = runner.restarts
    killed = time.time()
    chaos_stack.kill("tools-runner")
    run = await settle(run_id)
    events = await journal(chaos_postgres, run_id)
    results = of_kind(events, "tool.result")
    assert [r["error_code"] for r in results] == ["interrupted"], results
    assert run.status == "completed", (run.status, run.stop_reason)
    assert started(ledger, "write") == writes + 1
    noticed = next(e for e in events if e["kind"] == "tool.result")["ts"]
    print(f"runner death noticed after {_since(noticed, killed):.2f}s")  # noqa: T201
    await until(lambda: runner.restarts > restarts, timeout=20, what="the runner restarted")
    await chaos_stack.wait_ready(timeout=30, children=[runner])


def _since(ts: str, then: float) -> float:
    return datetime.fromisoformat(ts).timestamp() - then
