"""The gateway or the tools-runner SIGKILLed mid-call; the supervisor restarts it. A
model call has no effect outside, so it may be asked again or the run may fail with a
clear reason; a tool call in flight is re-run only when the tool is idempotent, and a
write whose outcome is unknown is never re-run: the model is told it was interrupted
(issue 3, "Durable and distributed"). A service killed outright leaves none of its
helper processes running (issue 27, item 6)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from proctree import Proc, descendants, kill_all, survivors
from tether_client import TetherClient
from tether_client.server.embedded import NatsServer
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.outputs import QueryOutput
from tether_common.messages.runs import RunEvent, RunView
from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.subjects import Subjects
from tether_common.testing import call, say, until, write_script
from tether_tools_runner.offload import maybe_offload

pytestmark = pytest.mark.e2e

StartRun = Callable[..., Awaitable[str]]
Settle = Callable[[str], Awaitable[RunView]]
History = Callable[[str], Awaitable[list[RunEvent]]]
WaitFor = Callable[[str, str], Awaitable[RunEvent]]

SERVER = Path(__file__).parent / "chaos_mcp_server.py"
SLOW_S = 3.0  # the tool is still running when its runner is killed


@pytest.fixture(scope="module")
def ledger(chaos_logs: Path) -> Path:
    return chaos_logs.parent / "mcp-ledger.txt"


@pytest.fixture(scope="module")
def hold(chaos_logs: Path) -> Path:
    """While this file exists, a (re)started MCP server waits before its handshake."""
    return chaos_logs.parent / "chaos.hold"


@pytest.fixture(scope="module")
def chaos_extra_env(ledger: Path, hold: Path) -> dict[str, str]:
    args = [str(SERVER), str(ledger), str(hold)]
    server = {"name": "chaos", "command": sys.executable, "args": args}
    # No catalogue cache in the brain: the MCP tools appear a moment after the runner
    # is ready, and again after each restart.
    # Both tools reach the instance, so they need a grant: the project allowlist gives it.
    return {
        "TETHER_RUNNER_MCP_SERVERS": json.dumps([server]),
        "TETHER_BRAIN_CATALOG_TTL_S": "0",
        "TETHER_BRAIN_ALLOWLIST": json.dumps(["mcp.chaos.slow_read", "mcp.chaos.slow_write"]),
    }


async def mcp_offered(chaos_stack: Supervisor) -> None:
    """Until the brain offers the chaos MCP server's tools as available (a moment after
    the runner is ready, since the runner starts the server in the background)."""
    wanted = {"mcp.chaos.slow_read", "mcp.chaos.slow_write"}
    async with TetherClient(chaos_stack.child("brain").url) as client:

        async def offered() -> bool:
            return wanted <= {t.name for t in await client.tools() if t.available}

        await until(offered, timeout=30, every=0.2, what="the MCP tools offered")


def started(ledger: Path, kind: str) -> int:
    """How many times the MCP server began a call of this kind (`read` / `write`)."""
    return ledger.read_text().splitlines().count(kind) if ledger.exists() else 0


async def kill_runner_during(
    tool: str,
    kind: str,
    chaos_stack: Supervisor,
    chaos_scripts: Path,
    ledger: Path,
    start_run: StartRun,
    *,
    hold: Path | None = None,
) -> tuple[str, int]:
    """Start a run whose one call is `tool`, SIGKILL the runner while the tool runs;
    returns the run id and how many times the tool had started before the kill. With
    `hold`, the restarted runner's MCP server is held before its handshake (the caller
    lets it go)."""
    await mcp_offered(chaos_stack)
    model = write_script(
        chaos_scripts,
        [[call(tool, seconds=SLOW_S)], say("finished after the crash")],
    )
    before = started(ledger, kind)
    run_id = await start_run(model, prompt="run the slow tool")
    # Not the `tool.call` event: a read's events are published with its step's commit,
    # after the call has returned. The ledger line says the tool itself is running.
    await until(lambda: started(ledger, kind) > before, timeout=15, what=f"{tool} started")
    runner = chaos_stack.child("tools-runner")
    restarts = runner.restarts
    if hold is not None:
        hold.touch()
    chaos_stack.kill("tools-runner")
    await until(lambda: runner.restarts > restarts, timeout=15, what="the runner restarted")
    await chaos_stack.wait_ready(timeout=30, children=[runner])
    if hold is None:
        await mcp_offered(chaos_stack)
    return run_id, started(ledger, kind)


def tool_result(events: list[RunEvent]) -> dict[str, Any]:
    results = [e.data for e in events if e.kind == "tool.result"]
    assert len(results) == 1, results
    return results[0]


@pytest.mark.timeout(120)
async def test_gateway_killed_mid_answer_is_restarted_and_the_run_ends(
    chaos_stack: Supervisor,
    chaos_scripts: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    model = write_script(
        chaos_scripts,
        [
            [call("current_time", timezone="UTC")],
            [{"pause_s": 3}, *say("answered by the restarted gateway")],
        ],
    )
    gateway = chaos_stack.child("gateway")
    restarts = gateway.restarts
    run_id = await start_run(model)
    await wait_for(run_id, "tool.result")
    await asyncio.sleep(0.5)  # the second model turn is under way (its 3 s pause)
    chaos_stack.kill("gateway")

    run = await settle(run_id)
    events = await history(run_id)
    assert gateway.restarts == restarts + 1
    await chaos_stack.wait_ready(timeout=30, children=[gateway])
    # A model call changes nothing outside: asking again is right, and so is failing
    # with a reason that names the model; an unexplained failure is not.
    if run.status == "completed":
        assert run.answer == "answered by the restarted gateway"
    else:
        assert run.status == "failed", run.status
        assert run.stop_reason, "a failed run must say why"
        assert "internal_error" not in run.stop_reason, run.stop_reason
    assert [e.kind for e in events].count("tool.result") == 1


@pytest.mark.timeout(120)
async def test_runner_killed_during_a_read_reruns_it(
    chaos_stack: Supervisor,
    chaos_scripts: Path,
    chaos_logs: Path,
    ledger: Path,
    hold: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    """The interleaving CI met once: the read is sent again to the restarted runner
    before its MCP server has connected. Held until the brain says the run waits for
    that server, the read is answered `tool_not_ready` (never `unknown_tool`, which is
    final), and runs once the server is let go."""
    held = hold.with_name(f"{hold.name}.held")  # the held server says it is there
    held.unlink(missing_ok=True)
    try:
        run_id, runs_at_kill = await kill_runner_during(
            "mcp.chaos.slow_read", "read", chaos_stack, chaos_scripts, ledger, start_run, hold=hold
        )
        brain_log = chaos_logs / "brain.log"
        said = f"run {run_id} waits for the MCP server chaos"
        await until(lambda: said in brain_log.read_text(errors="replace"), timeout=60, what=said)
        await until(held.exists, timeout=15, what=f"the MCP server held at {held}")
    finally:
        hold.unlink(missing_ok=True)

    run = await settle(run_id)
    result = tool_result(await history(run_id))
    assert run.status == "completed", (run.status, run.stop_reason)
    assert run.answer == "finished after the crash"
    assert result["ok"] is True, (
        result["error_code"],
        result["content"][:300],
    )  # idempotent: run again
    assert started(ledger, "read") == runs_at_kill + 1


@pytest.mark.timeout(120)
async def test_runner_killed_during_a_write_never_reruns_it(
    chaos_stack: Supervisor,
    chaos_scripts: Path,
    ledger: Path,
    start_run: StartRun,
    wait_for: WaitFor,
    settle: Settle,
    history: History,
) -> None:
    run_id, runs_at_kill = await kill_runner_during(
        "mcp.chaos.slow_write", "write", chaos_stack, chaos_scripts, ledger, start_run
    )

    run = await settle(run_id)
    result = tool_result(await history(run_id))
    assert started(ledger, "write") == runs_at_kill  # never run twice
    assert run.status == "completed", (run.status, run.stop_reason)
    # Its outcome is unknown: the model must be told it was interrupted, not that it
    # "could not be run" (it may well have run).
    assert result["ok"] is False
    assert result["error_code"] == "interrupted", result


# ---- No orphans (issue 27, item 6) ---------------------------------------------------

HELPER_FREE = ("brain", "gateway", "approvals")  # they start no process of their own


async def bus_of(chaos_stack: Supervisor, nats_url: str) -> Bus:
    subjects = Subjects(chaos_stack.env["TETHER_SUBJECT_PREFIX"])
    return await Bus.connect(nats_url, service="test", subjects=subjects)


async def execute(bus: Bus, name: str, args: dict[str, Any]) -> ToolResult:
    call = ExecuteTool(run_id="run-orphans", call_id=uuid.uuid4().hex[:8], name=name, args=args)
    return await bus.request(bus.subjects.tool_execute, call, timeout=60)


async def running_below(pid: int, wanted: str, timeout: float = 30.0) -> list[Proc]:
    """`pid`'s process tree once a process whose command line holds `wanted` is in it."""

    def tree() -> list[Proc] | None:
        below = descendants(pid)
        return below if any(wanted in p.command for p in below) else None

    return await until(tree, timeout=timeout, every=0.02, what=f"{wanted!r} under {pid}")


@pytest.mark.timeout(240)
async def test_a_killed_service_leaves_no_process_behind(
    chaos_stack: Supervisor, chaos_nats: NatsServer
) -> None:
    """Each service SIGKILLed while its helpers run: the runner's sandbox (a command still
    running), its file workers with their fork server and resource tracker, its MCP
    server; the output-store's grep worker. None of them is left a few seconds later.
    The other services start no process at all."""
    await mcp_offered(chaos_stack)
    for name in HELPER_FREE:
        child = chaos_stack.child(name)
        assert child.proc is not None
        assert descendants(child.proc.pid) == [], name
    runner, store = chaos_stack.child("tools-runner"), chaos_stack.child("output-store")
    restarts = runner.restarts, store.restarts
    assert runner.proc is not None
    assert store.proc is not None
    bus = await bus_of(chaos_stack, chaos_nats.url)
    calls: list[asyncio.Task[Any]] = []
    try:
        wrote = await execute(bus, "file_write", {"path": "orphans.txt", "content": "x"})
        assert wrote.ok, wrote.content
        shell = execute(bus, "shell", {"command": "sleep 300", "timeout_s": 120})
        calls.append(asyncio.create_task(shell))
        helpers = await running_below(runner.proc.pid, "sleep 300")
        data = b"\n".join(b"%064x" % n for n in range(400_000))  # 26 MB to search
        _, ref = await maybe_offload(bus, "run-orphans", "shell", data, threshold=4096)
        assert ref is not None
        query = QueryOutput(ref=ref, run_id="run-orphans", mode="grep", pattern="absent")
        calls.append(asyncio.create_task(bus.request(bus.subjects.output_query, query)))
        helpers += await running_below(store.proc.pid, "grep_worker")
        chaos_stack.kill("tools-runner")
        chaos_stack.kill("output-store")
        left = await asyncio.to_thread(survivors, helpers)
        kill_all(left)
    finally:
        for task in calls:  # their services are gone: no answer comes
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TetherError):
            await asyncio.gather(*calls)
        await bus.close()
    commands = " | ".join(p.command for p in helpers)
    for helper in ("sleep 300", "chaos_mcp_server.py", "grep_worker"):
        assert helper in commands, (helper, commands)
    if shutil.which("bwrap"):  # the sandbox around the command
        assert "bwrap" in commands, commands
    if os.geteuid() == 0:  # file workers drop from root to the sandbox user
        for helper in ("forkserver", "resource_tracker"):
            assert helper in commands, (helper, commands)
    assert left == [], [p.command for p in left]
    await until(
        lambda: runner.restarts > restarts[0] and store.restarts > restarts[1],
        timeout=30,
        what="the runner and the output-store restarted",
    )
    await chaos_stack.wait_ready(timeout=120, children=[runner, store])
