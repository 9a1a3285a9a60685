"""Two tools-runner replicas as real processes on one shared workspace and one database
(issue 15, items 6 and 7), driven through the bus as the brain drives them:

- one run tree's write → read → edit, the edit landing on the other replica (the only
  one listening then): the file is on the shared volume and the read's revision in
  PostgreSQL; another tree cannot see the file, a sub-agent of the tree can;
- a non-idempotent MCP call sent several times with one key (at once, to both replicas)
  runs once, and every answer is the recorded result; the key reaches the MCP server in
  the request's `_meta`;
- a key whose runner died mid-call answers `in_doubt`, until an operator's
  `retry_in_doubt` runs it again; a key reused for another call is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.tools import TOOL_NOT_READY, ExecuteTool, ToolResult, effect_key
from tether_common.testing import until
from tether_tools_runner.effects import Claimed, EffectLedger, Recorded, request_digest
from tether_tools_runner.sandbox import sandbox_user

# Generous: the first test also starts the stack and a second runner, on a loaded machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SERVER = Path(__file__).parent.parent / "chaos" / "chaos_mcp_server.py"
LEASE_S = 2.0
WRITE = "mcp.chaos.slow_write"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The volume both replicas mount: the workspace root and the MCP server's ledger."""
    base = tmp_path_factory.mktemp("replicas")
    os.chmod(base, 0o755)  # the sandbox user passes through to its folders
    return base


@pytest.fixture(scope="module")
def stack_extra_env(shared: Path) -> dict[str, str]:
    server = {
        "name": "chaos",
        "command": sys.executable,
        "args": [str(SERVER), str(shared / "ledger.txt")],
    }
    return {
        "TETHER_RUNNER_WORKSPACE": str(shared / "workspace"),
        "TETHER_RUNNER_WORKSPACE_LAYOUT": "per_tree",
        "TETHER_RUNNER_EFFECT_LEASE_S": str(LEASE_S),
        "TETHER_RUNNER_MCP_SERVERS": json.dumps([server]),
    }


async def execute(
    bus: Bus,
    name: str,
    args: dict[str, Any],
    *,
    run_id: str,
    workspace: str,
    call_id: str | None = None,
    retry_in_doubt: bool = False,
) -> ToolResult:
    """One call as the brain sends it; a replica whose MCP server is still starting
    answers `tool_not_ready` before claiming anything, so that is sent again."""
    call_id = call_id or f"c_{uuid.uuid4().hex[:8]}"
    call = ExecuteTool(
        run_id=run_id,
        call_id=call_id,
        name=name,
        args=args,
        idempotency_key=effect_key(run_id, call_id),
        workspace=workspace,
        retry_in_doubt=retry_in_doubt,
    )

    async def execute() -> ToolResult:
        result: ToolResult = await bus.request(bus.subjects.tool_execute, call, timeout=60)
        return result

    # 120 s: 60 s of `tool_not_ready` answers, and the last request's own 60 s.
    return await until(
        execute,
        done=lambda result: result.error_code != TOOL_NOT_READY,
        timeout=120,
        every=0.2,
        what=f"{name} answered by a ready replica",
    )


async def write_once(
    bus: Bus, args: dict[str, Any], run_id: str, call_id: str, *, retry: bool = False
) -> ToolResult:
    """The MCP write as call `call_id` of run `run_id` (so always the same key)."""
    return await execute(
        bus, WRITE, args, run_id=run_id, workspace=run_id, call_id=call_id, retry_in_doubt=retry
    )


def writes(shared: Path) -> int:
    ledger = shared / "ledger.txt"
    return ledger.read_text().splitlines().count("write") if ledger.exists() else 0


async def test_write_read_edit_across_replicas(
    stack: Supervisor, stack_bus: Bus, shared: Path
) -> None:
    tree = f"run_{uuid.uuid4().hex}"
    first = stack.child("tools-runner")
    wrote = await execute(
        stack_bus,
        "file_write",
        {"path": "notes.txt", "content": "alpha\n"},
        run_id=tree,
        workspace=tree,
    )
    read = await execute(stack_bus, "file_read", {"path": "notes.txt"}, run_id=tree, workspace=tree)
    assert (wrote.ok, read.ok) == (True, True), (wrote.content, read.content)
    # Only the second replica listens from here on: the edit must find the file on the
    # shared volume and the read's revision in PostgreSQL.
    second = stack.add_replica("tools-runner")
    await stack.start_child(second)
    await stack.wait_ready(timeout=120, children=[second])
    await stack.stop_child(first)
    try:
        edited = await execute(
            stack_bus,
            "file_edit",
            {"path": "notes.txt", "old_text": "alpha", "new_text": "beta"},
            run_id=tree,
            workspace=tree,
        )
        assert edited.ok, edited.content
        folder = shared / "workspace" / tree
        assert (folder / "notes.txt").read_text() == "beta\n"
        user = sandbox_user()
        info = folder.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, user.uid)
        assert stat.S_IMODE((shared / "workspace").stat().st_mode) == 0o711

        # Another tree has a folder of its own; a sub-agent of this tree shares its
        # folder but must read before it edits (revisions are per run).
        other = f"run_{uuid.uuid4().hex}"
        unseen = await execute(
            stack_bus, "file_read", {"path": "notes.txt"}, run_id=other, workspace=other
        )
        assert unseen.error_code == "not_found", unseen.content
        child = f"run_{uuid.uuid4().hex}"
        blind = await execute(
            stack_bus,
            "file_edit",
            {"path": "notes.txt", "old_text": "beta", "new_text": "gamma"},
            run_id=child,
            workspace=tree,
        )
        assert blind.error_code == "not_read", blind.content
        seen = await execute(
            stack_bus, "file_read", {"path": "notes.txt"}, run_id=child, workspace=tree
        )
        assert seen.ok, seen.content
        assert "beta" in seen.content
    finally:
        await stack.start_child(first)
        await stack.wait_ready(timeout=120, children=[first])


async def test_one_key_runs_once_on_two_replicas(
    stack: Supervisor, stack_bus: Bus, shared: Path
) -> None:
    """Both replicas listen (the previous test left two); three sends of one key, two of
    them at once, run the write once and all answer its recorded result."""
    run_id, call_id = f"run_{uuid.uuid4().hex}", "c_once"
    before = writes(shared)
    together = await asyncio.gather(
        write_once(stack_bus, {"seconds": 1.0}, run_id, call_id),
        write_once(stack_bus, {"seconds": 1.0}, run_id, call_id),
    )
    again = await write_once(stack_bus, {"seconds": 1.0}, run_id, call_id)
    assert writes(shared) == before + 1
    assert {(r.ok, r.content) for r in [*together, again]} == {(True, "written after 1.0s")}
    keys = (shared / "ledger.keys").read_text().splitlines()
    assert keys.count(effect_key(run_id, call_id)) == 1  # the key reached the server

    conflicting = await write_once(stack_bus, {"seconds": 0.1}, run_id, call_id)
    assert conflicting.error_code == "key_conflict", conflicting.content
    assert writes(shared) == before + 1


async def test_a_key_left_without_outcome_is_in_doubt_until_retried(
    stack: Supervisor, stack_bus: Bus, shared: Path, engine: AsyncEngine
) -> None:
    """A claim whose replica died mid-call (its lease lapsed, no outcome): a repeat is
    answered `in_doubt` and runs nothing; an operator's retry runs it once more."""
    run_id, call_id = f"run_{uuid.uuid4().hex}", "c_doubt"
    args = {"seconds": 0.1}
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tool_effects (key, run_id, tool, digest, replica, lease_until) "
                "VALUES (:key, :run, :tool, :digest, 'gone:1', now() - interval '1 second')"
            ),
            {
                "key": effect_key(run_id, call_id),
                "run": run_id,
                "tool": WRITE,
                "digest": request_digest(WRITE, args),
            },
        )
    before = writes(shared)
    doubt = await write_once(stack_bus, args, run_id, call_id)
    assert doubt.error_code == "in_doubt", doubt.content
    assert writes(shared) == before
    retried = await write_once(stack_bus, args, run_id, call_id, retry=True)
    replayed = await write_once(stack_bus, args, run_id, call_id, retry=True)
    assert (retried.ok, replayed.content) == (True, retried.content)
    assert writes(shared) == before + 1


async def test_two_replicas_claiming_one_key_at_once(
    stack: Supervisor, engine: AsyncEngine
) -> None:
    """The ledger itself: of two replicas claiming one key at the same moment exactly one
    runs it; the other waits for its outcome and answers it."""
    call = ExecuteTool(
        run_id=f"run_{uuid.uuid4().hex}", call_id="c_race", name=WRITE, args={"seconds": 1}
    )
    key = effect_key(call.run_id, call.call_id)
    ledgers = [EffectLedger(engine, f"replica-{n}", lease_s=30) for n in (1, 2)]
    claims = [asyncio.create_task(ledger.claim(call, key, wait_s=30)) for ledger in ledgers]
    done, waiting = await asyncio.wait(claims, return_when=asyncio.FIRST_COMPLETED)
    assert (len(done), len(waiting)) == (1, 1)
    (winner,) = done
    claim = winner.result()
    assert isinstance(claim, Claimed)
    answer = ToolResult(call_id=call.call_id, name=WRITE, ok=True, content="once")
    owner = ledgers[claims.index(winner)]
    assert await owner.record(claim, answer)
    owner.release(claim)
    (loser,) = waiting
    assert await asyncio.wait_for(loser, 30) == Recorded(answer)
