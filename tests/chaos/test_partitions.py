"""Several hosts, real partitions (issue 15, item 8): two brains, a runner and a gateway,
a 3-node NATS cluster (streams at three replicas) and PostgreSQL, each in its own network
namespace. A brain cut off from PostgreSQL mid-run fences itself (stops acting on the
run) before its lease would end, the other brain takes the run over, and nothing is
journalled or run twice; then a NATS node is lost and no event or decision is.

Needs root and iproute2 (CI runs as root); it fails, never skips, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from tether_client import TetherClient
from tether_client.server.testing.netlab import (
    LabService,
    LabStack,
    NetLab,
    lab_env,
    start_lab,
    tool_offered,
)
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.approvals import ApprovalDecided
from tether_common.messages.runs import TERMINAL_STATUSES, RunView
from tether_common.subjects import Subjects
from tether_common.testing import Turn, call, say, until, write_script

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MCP_SERVER = Path(__file__).parent / "chaos_mcp_server.py"
LEASE_S = 2.0
BUS_LOSS_S = 1.5
WRITE = "mcp.chaos.slow_write"


@dataclass
class Lab:
    stack: LabStack
    lab: NetLab
    brains: list[LabService]
    scripts: Path
    ledger: Path
    prefix: str

    def host(self, name: str) -> Any:
        return self.lab.hosts[name]


@pytest.fixture(scope="module")
async def lab() -> AsyncIterator[Lab]:
    base = Path(tempfile.mkdtemp(prefix="tether-partitions-"))
    base.chmod(0o755)  # the MCP server and the sandbox user read below it
    ledger = base / "ledger.txt"
    env = lab_env(
        base,
        token=os.environ["TETHER_TOKEN"],
        tool=WRITE,
        mcp_server=MCP_SERVER,
        ledger=ledger,
        lease_s=LEASE_S,
        bus_loss_s=BUS_LOSS_S,
    )
    try:
        with NetLab() as net:
            stack, brains = await start_lab(net, base, env)
            try:
                await tool_offered(brains[0], WRITE, os.environ["TETHER_TOKEN"])
                prefix = env["TETHER_SUBJECT_PREFIX"]
                yield Lab(stack, net, brains, base / "scripts", ledger, prefix)
            finally:
                await stack.close()
    finally:
        if not os.environ.get("TETHER_CHAOS_KEEP"):
            shutil.rmtree(base, ignore_errors=True)


async def settled(url: str, run_id: str, timeout: float = 60.0) -> RunView:
    async with TetherClient(url, timeout=5) as client:

        async def ended() -> RunView | None:
            try:
                run = await client.get_run(run_id)
            except (httpx.HTTPError, TetherError):
                return None
            return run if run.status in TERMINAL_STATUSES else None

        return await until(ended, timeout=timeout, every=0.1, what=f"run {run_id} to end")


async def journal(url: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT kind, data FROM run_journal WHERE run_id = $1 ORDER BY seq", run_id
        )
    finally:
        await conn.close()
    return [(r["kind"], json.loads(r["data"])) for r in rows]


def check_once(entries: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """No step journalled twice, events numbered 1..n, one run.end; the events."""
    steps = [(d["step"], d["kind"], d.get("call_id")) for k, d in entries if k == "step"]
    assert len(steps) == len(set(steps)), f"a step journalled twice: {steps}"
    events = [d for k, d in entries if k == "event"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["kind"] for e in events].count("run.end") == 1
    return events


async def test_a_brain_cut_from_postgres_fences_itself_and_the_other_takes_over(
    lab: Lab,
) -> None:
    b1, b2 = lab.brains
    turns: list[Turn] = [
        # Distinct arguments: identical calls in one run are answered from a cache.
        [call(WRITE, seconds=0.1)],
        [{"pause_s": 4.0}, call(WRITE, seconds=0.11)],
        [call(WRITE, seconds=0.12)],
        say("written three times"),
    ]
    model = write_script(lab.scripts, turns)
    async with TetherClient(b1.url) as client:
        run_id = (
            await client.start_run("write", provider="scripted", model=model, agent="lab")
        ).run_id
        async for event in client.events(run_id):
            if event.kind == "tool.result":
                break
    # brain-1 is in the 4 s model turn: cut it from PostgreSQL (both ways).
    lab.lab.cut(lab.host("b1"), lab.host("pg"))
    try:
        run = await settled(b2.url, run_id)
        # Fenced (or its task ended by itself on a failed commit): no more acting.
        fenced = await until(
            lambda: b1.stopped_acting(run_id), timeout=30, every=0.1, what="brain-1 to stop acting"
        )
    finally:
        lab.lab.heal(lab.host("b1"), lab.host("pg"))
    took_over = b2.logged(f"taking over run {run_id}")
    assert took_over is not None, "brain-2 never took the run over"
    # A takeover needs the lease to have run out in the database: brain-1 stopped first.
    assert fenced < took_over
    print(f"fenced {(took_over - fenced).total_seconds():.2f} s before the takeover")  # noqa: T201
    assert run.status == "completed"
    assert run.answer == "written three times"

    events = check_once(await journal(lab.stack.database_url, run_id))
    results = [e["data"] for e in events if e["kind"] == "tool.result"]
    assert [r["name"] for r in results] == [WRITE] * 3, [e["kind"] for e in events]
    assert all(r.get("error_code") is None for r in results), [
        (r.get("error_code"), r.get("content")) for r in results
    ]
    # Each write ran exactly once: the ledger counts executions outside the system.
    assert lab.ledger.read_text().splitlines().count("write") == 3
    # brain-1 serves again after the heal, and did not take its run back.
    async with TetherClient(b1.url) as client:
        assert (await client.get_run(run_id)).status == "completed"
    assert b1.logged(f"taking over run {run_id}") is None


async def test_a_nats_node_lost_loses_no_event_or_decision(lab: Lab) -> None:
    subjects = Subjects(lab.prefix, stream_replicas=3)
    bus = await Bus.connect(lab.stack.nats_url, service="lab", subjects=subjects)
    try:
        events_stream, decisions_stream = (s.name for s in subjects.streams)
        # A service left at the default (one copy) declares the streams: none shrinks.
        async with await Bus.connect(
            lab.stack.nats_url, service="lab", subjects=Subjects(lab.prefix)
        ) as default:
            await default.ensure_streams()
        for name in (events_stream, decisions_stream):
            assert (await bus.jetstream.stream_info(name)).config.num_replicas == 3
        # Decisions for no run (the brains ack and drop them), kept by the stream.
        decided = [
            ApprovalDecided(
                approval_id=f"ap_{i}",
                run_id=f"run_absent_{i}",
                step=1,
                decision="deny",
                action_digest="none",
                decided_by="lab",
                ts=datetime.now(UTC),
            )
            for i in range(5)
        ]
        seqs = [await bus.js_publish(subjects.approval_decided, item) for item in decided]
        model = write_script(
            lab.scripts,
            [[call(WRITE, seconds=0.2)], [{"pause_s": 2.0}, call(WRITE, seconds=0.21)], say("ok")],
        )
        b2 = lab.brains[1]
        async with TetherClient(b2.url) as client:
            run_id = (
                await client.start_run("go", provider="scripted", model=model, agent="lab")
            ).run_id
            async for event in client.events(run_id):
                if event.kind == "tool.result":
                    break
        # Lose the node that leads the events stream, mid-run.
        leader = (await bus.jetstream.stream_info(events_stream)).cluster.leader
        lab.stack.kill_node(int(leader.removeprefix("n")) - 1)
        run = await settled(b2.url, run_id)
        assert run.status == "completed"
        journalled = check_once(await journal(lab.stack.database_url, run_id))

        async def streamed() -> list[int] | None:
            try:
                events = await stream_events(bus, subjects.run_events(run_id))
            except NatsTimeoutError:  # the stream is electing a new leader: read again
                return None
            seqs = [e["seq"] for e in events]
            return seqs if seqs == [e["seq"] for e in journalled] else None

        await until(streamed, timeout=60, every=0.1, what="every journalled event streamed")

        async def decisions_kept() -> list[str] | None:
            try:  # the decisions stream may be electing a leader too (the node led it)
                kept = [await bus.jetstream.get_msg(decisions_stream, seq) for seq in seqs]
            except NatsTimeoutError:
                return None
            return [json.loads(msg.data)["approval_id"] for msg in kept]

        kept = await until(decisions_kept, timeout=60, every=0.1, what="the decisions stream")
        assert kept == [item.approval_id for item in decided]
    finally:
        await bus.close()


async def stream_events(bus: Bus, subject: str) -> list[dict[str, Any]]:
    """What the stream holds on `subject` now (read to the first silence)."""
    found: list[dict[str, Any]] = []
    async for data in bus.replay(subject, idle_s=1.0):
        if data is None:
            break
        found.append(json.loads(data))
    return found
