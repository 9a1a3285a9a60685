"""A run calling a tool of an MCP server that is not up yet, through the real services
(issue 15): the call waits for the server, bounded by the brain's `service_wait_s`, and
says so, then runs; a server that never comes up ends the call with a clear, final
error after that wait; a name of a server that is not configured is refused at once.

Each server here is the chaos MCP server held before its handshake while a hold file
exists, so the test, not the machine's speed, decides when it comes up."""

from __future__ import annotations

import asyncio
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.runs import RunEvent
from tether_common.messages.tools import TOOL_NOT_READY, Catalog, CatalogRequest
from tether_common.testing import call, say, until, write_script

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SERVER = Path(__file__).parent / "chaos_mcp_server.py"
# The bound on a run's wait for a service; the never-up test spends it once.
WAIT_S = 15.0
DEADLINE_S = 60.0  # for a condition to hold, on a loaded machine
# `gated`: held until a test lets it start; `flaky`: up, then dropped and held again;
# `never`: held for good.
SERVERS = ("gated", "flaky", "never")
HELD_AT_START = ("gated", "never")


@pytest.fixture(scope="module")
def mcp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mcp-ready")
    for name in HELD_AT_START:
        (base / f"{name}.hold").touch()
    return base


@pytest.fixture(scope="module")
def stack_extra_env(mcp_dir: Path) -> dict[str, str]:
    servers = [
        {
            "name": name,
            "command": sys.executable,
            "args": [str(SERVER), str(mcp_dir / f"{name}.ledger"), str(mcp_dir / f"{name}.hold")],
        }
        for name in SERVERS
    ]
    tools = [f"mcp.{name}.{tool}" for name in SERVERS for tool in ("slow_read", "slow_write")]
    return {
        "TETHER_RUNNER_MCP_SERVERS": json.dumps(servers),
        # A held handshake is a server still starting, however long the stack takes.
        "TETHER_RUNNER_MCP_CONNECT_TIMEOUT_S": "600",
        # A server killed under the runner is noticed at the next tool-list refresh.
        "TETHER_RUNNER_MCP_REFRESH_S": "1",
        "TETHER_BRAIN_SERVICE_WAIT_S": str(WAIT_S),
        # Every tool here reaches the instance, so it needs a grant: the allowlist gives it.
        "TETHER_BRAIN_ALLOWLIST": json.dumps(tools),
    }


def waits(events: list[RunEvent]) -> list[tuple[str, float]]:
    """What the run said it waited for, and for how long at most."""
    return [
        (e.data["service"], e.data["wait_s"])
        for e in events
        if e.kind == "guard" and e.data.get("kind") == "waiting"
    ]


async def says_it_waits(stack: Supervisor, run_id: str, server: str) -> None:
    """Until the brain logs that the run waits for `server`. (The run's `waiting` event
    is journalled with its step, so a follower reads it once the wait is over.)"""
    assert stack.log_dir is not None
    brain_log = stack.log_dir / "brain.log"
    said = f"run {run_id} waits for the MCP server {server}"
    await until(partial(logged, brain_log, said), timeout=DEADLINE_S, every=0.1, what=said)


async def logged(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


async def in_catalogue(bus: Bus, server: str) -> bool:
    """The runner's catalogue names `server` as connecting."""
    catalog: Catalog = await bus.request(bus.subjects.tool_catalog, CatalogRequest(), timeout=10)
    return server in catalog.connecting


async def held(mcp_dir: Path, server: str) -> bool:
    """The server's process has started and waits for its hold to go."""
    return (mcp_dir / f"{server}.hold.held").exists()


def ran(mcp_dir: Path, server: str, kind: str) -> int:
    ledger = mcp_dir / f"{server}.ledger"
    return ledger.read_text().splitlines().count(kind) if ledger.exists() else 0


async def ended(client: TetherClient, run_id: str) -> list[RunEvent]:
    async with asyncio.timeout(DEADLINE_S + WAIT_S):
        return [e async for e in client.events(run_id)]


def results(events: list[RunEvent]) -> dict[str, dict[str, Any]]:
    return {e.data["name"]: e.data for e in events if e.kind == "tool.result"}


async def test_a_call_of_a_server_still_starting_waits_for_it_then_runs(
    stack: Supervisor, scripts_dir: Path, mcp_dir: Path
) -> None:
    """No replica has seen the server up: the brain knows no descriptor of the tool and
    waits for the runner to list it (before the gates, which then judge it)."""
    model = write_script(
        scripts_dir, [[call("mcp.gated.slow_read", seconds=0)], say("read it after the wait")]
    )
    async with TetherClient(stack.child("brain").url) as client:
        run_id = (await client.start_run("read", provider="scripted", model=model)).run_id
        await says_it_waits(stack, run_id, "gated")
        await until(
            partial(held, mcp_dir, "gated"),
            timeout=DEADLINE_S,
            every=0.1,
            what="the gated server held, ready to start",
        )
        (mcp_dir / "gated.hold").unlink()
        events = await ended(client, run_id)
        run = await client.get_run(run_id)
    read = results(events)["mcp.gated.slow_read"]
    assert (read["ok"], read["error_code"]) == (True, None), read["content"]
    assert (run.status, run.answer) == ("completed", "read it after the wait")
    assert waits(events) == [("mcp.gated", WAIT_S)]
    assert ran(mcp_dir, "gated", "read") == 1


async def test_a_call_answered_not_ready_by_a_reconnecting_server_is_sent_again(
    stack: Supervisor, scripts_dir: Path, mcp_dir: Path, stack_bus: Bus
) -> None:
    """The brain knows the tools; their server dropped and is reconnecting. The runner
    answers `tool_not_ready` (not `unknown_tool`, not a final `mcp_unavailable`); the
    brain waits and sends again. The write, answered not ready, claimed no key: it runs
    once when the server is back."""

    async with TetherClient(stack.child("brain").url) as client:

        async def offered() -> bool:
            return any(
                t.name == "mcp.flaky.slow_read" and t.available for t in await client.tools()
            )

        await until(offered, timeout=DEADLINE_S, every=0.1, what="the flaky server's tools")
        reconnecting = partial(in_catalogue, stack_bus, "flaky")
        hold = mcp_dir / "flaky.hold"
        hold.touch()
        (mcp_dir / "flaky.hold.held").unlink(missing_ok=True)
        for proc in psutil.process_iter(["cmdline"]):
            if str(hold) in (proc.info["cmdline"] or []):
                proc.kill()  # the runner's server process, from under it
        await until(
            reconnecting,
            timeout=DEADLINE_S,
            every=0.1,
            what="the runner to see the server reconnecting",
        )
        model = write_script(
            scripts_dir,
            [
                [call("mcp.flaky.slow_read", seconds=0), call("mcp.flaky.slow_write", seconds=0)],
                say("both ran after the wait"),
            ],
        )
        run_id = (await client.start_run("both", provider="scripted", model=model)).run_id
        await says_it_waits(stack, run_id, "flaky")
        await until(
            partial(held, mcp_dir, "flaky"),
            timeout=DEADLINE_S,
            every=0.1,
            what="the flaky server held, ready to start",
        )
        assert (ran(mcp_dir, "flaky", "read"), ran(mcp_dir, "flaky", "write")) == (0, 0)
        hold.unlink()
        events = await ended(client, run_id)
        run = await client.get_run(run_id)
    answered = results(events)
    for name in ("mcp.flaky.slow_read", "mcp.flaky.slow_write"):
        assert (answered[name]["ok"], answered[name]["error_code"]) == (True, None), answered
    assert (run.status, run.answer) == ("completed", "both ran after the wait")
    assert waits(events) == [("mcp.flaky", WAIT_S)] * 2  # once for each call
    assert (ran(mcp_dir, "flaky", "read"), ran(mcp_dir, "flaky", "write")) == (1, 1)


async def test_a_server_that_never_comes_up_fails_the_call_after_the_wait(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """The wait is bounded by the brain's setting, and what follows is final and names
    the server; a made-up server's name is refused at once, never waited for."""
    model = write_script(
        scripts_dir,
        [
            [call("mcp.never.slow_read", seconds=0), call("mcp.ghost.zzz_unlisted", seconds=0)],
            say("told the user"),
        ],
    )
    async with TetherClient(stack.child("brain").url) as client:
        run_id = (await client.start_run("never", provider="scripted", model=model)).run_id
        events = await ended(client, run_id)
        run = await client.get_run(run_id)
    answered = results(events)
    assert set(answered) == {"mcp.never.slow_read", "mcp.ghost.zzz_unlisted"}, [
        (e.kind, e.data) for e in events
    ]
    never, ghost = answered["mcp.never.slow_read"], answered["mcp.ghost.zzz_unlisted"]
    assert never["error_code"] == TOOL_NOT_READY, never
    assert "MCP server 'never' is still connecting" in never["content"], never
    assert ghost["error_code"] == "unknown_tool", ghost
    assert waits(events) == [("mcp.never", WAIT_S)]  # not for the made-up server
    assert (run.status, run.answer) == ("completed", "told the user")
