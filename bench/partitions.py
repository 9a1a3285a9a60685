"""Network partitions across hosts (issue 15, item 8): the partition half of
`python -m bench chaos`.

Two brain replicas, a gateway and a runner, a 3-node NATS cluster (streams at three
replicas) and PostgreSQL, each in its own network namespace
(`tether_client.server.testing.netlab`). Each round starts a few multi-step runs on one replica
(each step a model turn, then a call of `mcp.chaos.tagged_write`, which names its call in
a ledger outside the system), cuts that replica off from PostgreSQL or from every NATS
node once each run has made a call, waits until the other replica has finished them,
heals the cut, and checks the cut replica works again. Rounds alternate the replica and
the kind of cut. Printed: runs tried / lost / ended twice, steps and effects duplicated,
the fencing time after the cut (when the cut replica logged that it stopped acting on
each run) and the takeover time (when the other replica took each run over), p50/p99.
Needs root (network namespaces); without it the suite says so and measures nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.stack import OPERATOR_TOKEN
from bench.stats import line
from tether_client import TetherClient
from tether_client.server.testing.netlab import (
    LabService,
    LabStack,
    NetLab,
    lab_env,
    start_lab,
    tool_offered,
)
from tether_common.errors import ConfigError, TetherError
from tether_common.testing import Turn, call, say, until, write_script

LEASE_S = 2.0
BUS_LOSS_S = 1.5
RUNS_PER_ROUND = 4
CALLS_PER_RUN = 3
TURN_PAUSE_S = 1.5  # each model turn thinks this long: a cut mostly lands in a turn
SETTLE_S = 90.0
TOOL = "mcp.chaos.tagged_write"
SERVER = Path(__file__).resolve().parents[1] / "tests" / "chaos" / "chaos_mcp_server.py"
CUTS = ("postgres", "nats")
TERMINAL = ("completed", "failed", "stopped")

Results = dict[str, float]


@dataclass
class Tally:
    tried: int = 0
    lost: int = 0
    ended_twice: int = 0
    steps_duplicated: int = 0
    effects: int = 0
    effects_duplicated: int = 0
    unfenced: int = 0  # runs live at a cut whose replica never said it stopped acting
    fenced_after_takeover: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    fence_ms: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CUTS})
    takeover_ms: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CUTS})


@dataclass
class Lab:
    net: NetLab
    stack: LabStack
    brains: list[LabService]
    scripts: Path
    ledger: Path
    db: asyncpg.Connection


async def measure_partitions(rounds: int, results: Results) -> None:
    try:
        net = NetLab()
    except ConfigError as exc:
        print(f"partitions: not measured: {exc.message}")
        return
    base = Path(tempfile.mkdtemp(prefix="tether-bench-partitions-"))
    base.chmod(0o755)  # the MCP server and the sandbox user read below it
    ledger = base / "ledger.txt"
    env = lab_env(
        base,
        token=OPERATOR_TOKEN,
        tool=TOOL,
        mcp_server=SERVER,
        ledger=ledger,
        lease_s=LEASE_S,
        bus_loss_s=BUS_LOSS_S,
    )
    try:
        with net:
            stack, brains = await start_lab(net, base, env, ready_s=300.0)
            try:
                db = await asyncpg.connect(stack.database_url)
                try:
                    lab = Lab(net, stack, brains, base / "scripts", ledger, db)
                    await measure(lab, rounds, results)
                finally:
                    await db.close()
            finally:
                await stack.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def measure(lab: Lab, rounds: int, results: Results) -> None:
    tally = Tally()
    for brain in lab.brains:
        await working(lab, brain)
        await tool_offered(brain, TOOL, OPERATOR_TOKEN)
    started = time.monotonic()
    run_ids: list[str] = []
    for number in range(rounds):
        victim = lab.brains[number % 2]
        cut = CUTS[(number // 2) % 2]
        run_ids += await one_round(lab, tally, victim, lab.brains[1 - number % 2], cut)
    print(f"{rounds} rounds in {time.monotonic() - started:.0f} s")
    await check_runs(lab, tally, run_ids)
    report(tally, results)


async def one_round(
    lab: Lab, tally: Tally, victim: LabService, survivor: LabService, cut: str
) -> list[str]:
    """Runs started on `victim`, `victim` cut off once each has made a call, the runs
    settled (by `survivor`), the cut healed, and `victim` shown to work again."""
    run_ids = [await start(lab, victim) for _ in range(RUNS_PER_ROUND)]
    await until(
        lambda: each_called(lab, run_ids),
        timeout=SETTLE_S,
        what="the runs making a call",
        every=0.2,
    )
    peers = [lab.net.hosts[n] for n in (("pg",) if cut == "postgres" else ("n1", "n2", "n3"))]
    cut_at = datetime.now(UTC)
    for peer in peers:
        lab.net.cut(victim.host, peer)
    try:
        await until(
            lambda: all_ended(lab, run_ids),
            timeout=SETTLE_S,
            what="runs ending after a cut",
            every=0.2,
        )
    finally:
        for peer in peers:
            lab.net.heal(victim.host, peer)
    for run_id in run_ids:
        stopped = victim.stopped_acting(run_id)
        took = survivor.logged(f"taking over run {run_id}")
        if stopped is None:
            tally.unfenced += 1
        else:
            tally.fence_ms[cut].append((stopped - cut_at).total_seconds() * 1000)
        if took is not None:
            tally.takeover_ms[cut].append((took - cut_at).total_seconds() * 1000)
            if stopped is not None and stopped >= took:
                tally.fenced_after_takeover += 1
    await working(lab, victim)
    return run_ids


async def start(lab: Lab, brain: LabService) -> str:
    turns: list[Turn] = [
        [{"pause_s": TURN_PAUSE_S}, call(TOOL, tag=uuid.uuid4().hex, seconds=0.05)]
        for _ in range(CALLS_PER_RUN)
    ]
    model = write_script(lab.scripts, [*turns, say("partitioned and done")])
    async with TetherClient(brain.url, token=OPERATOR_TOKEN) as client:
        accepted = await client.start_run("go", provider="scripted", model=model, agent="lab")
    return accepted.run_id


async def working(lab: Lab, brain: LabService) -> None:
    """A one-turn run on `brain` completes: it reaches NATS, PostgreSQL and the gateway."""
    model = write_script(lab.scripts, [say("here")])

    async def done() -> bool:
        try:
            async with TetherClient(brain.url, token=OPERATOR_TOKEN, timeout=5) as client:
                run_id = (await client.start_run("ping", provider="scripted", model=model)).run_id
                ended = await until(
                    lambda: client.get_run(run_id),
                    timeout=10.0,
                    what="the ping run's end",
                    every=0.1,
                    done=lambda run: run.status in TERMINAL,
                )
                return ended is not None
        except (httpx.HTTPError, TetherError, AssertionError):  # AssertionError: not ended in 10 s
            return False

    await until(done, timeout=120.0, what=f"{brain.label} working after the heal", every=0.2)


async def each_called(lab: Lab, run_ids: list[str]) -> bool:
    """Each run has a call's result (or has already ended: it is counted, not waited on)."""
    count = await lab.db.fetchval(
        "SELECT count(*) FROM runs r WHERE run_id = ANY($1) AND (status = ANY($2) OR EXISTS "
        "(SELECT 1 FROM run_journal j WHERE j.run_id = r.run_id AND j.kind = 'event' "
        "AND j.data->>'kind' = 'tool.result'))",
        run_ids,
        list(TERMINAL),
    )
    return bool(count == len(run_ids))


async def all_ended(lab: Lab, run_ids: list[str]) -> bool:
    count = await lab.db.fetchval(
        "SELECT count(*) FROM runs WHERE run_id = ANY($1) AND status = ANY($2)",
        run_ids,
        list(TERMINAL),
    )
    return bool(count == len(run_ids))


async def check_runs(lab: Lab, tally: Tally, run_ids: list[str]) -> None:
    """Every run from the journal, every effect from the ledger."""
    tally.tried = len(run_ids)
    rows = await lab.db.fetch("SELECT run_id, status FROM runs WHERE run_id = ANY($1)", run_ids)
    tally.statuses = Counter(r["status"] for r in rows)
    tally.lost = len(run_ids) - tally.statuses["completed"]
    entries = await lab.db.fetch(
        "SELECT run_id, kind, data FROM run_journal WHERE run_id = ANY($1) AND kind <> 'message'",
        run_ids,
    )
    steps: Counter[tuple[Any, ...]] = Counter()
    ends: Counter[str] = Counter()
    for entry in entries:
        data = json.loads(entry["data"])
        if entry["kind"] == "step":
            steps[(entry["run_id"], data["step"], data["kind"], data.get("call_id"))] += 1
        elif data["kind"] == "run.end":
            ends[entry["run_id"]] += 1
    tally.steps_duplicated = sum(n - 1 for n in steps.values())
    tally.ended_twice = sum(1 for n in ends.values() if n > 1)
    lines = lab.ledger.read_text().splitlines() if lab.ledger.exists() else []
    ran = Counter(item.removeprefix("effect ") for item in lines if item.startswith("effect "))
    tally.effects = sum(ran.values())
    tally.effects_duplicated = sum(n - 1 for n in ran.values() if n > 1)


def report(tally: Tally, results: Results) -> None:
    print(
        f"runs tried {tally.tried}   lost (not completed) {tally.lost}   ended twice "
        f"{tally.ended_twice}   by status {dict(tally.statuses)}"
    )
    print(
        f"steps duplicated {tally.steps_duplicated}   effects {tally.effects}, duplicated "
        f"{tally.effects_duplicated}"
    )
    print(
        f"runs the cut replica never stopped acting on {tally.unfenced}   stopped only after "
        f"the takeover {tally.fenced_after_takeover}"
    )
    for cut in CUTS:
        if tally.fence_ms[cut]:
            print(line(f"stopped acting after a cut from {cut}", tally.fence_ms[cut]))
        if tally.takeover_ms[cut]:
            print(line(f"takeover after a cut from {cut}", tally.takeover_ms[cut]))
    print(
        f"(lease {LEASE_S} s, fenced at {LEASE_S * 0.8:.1f} s without a renewal; NATS lost "
        f"after {BUS_LOSS_S} s without a round trip)"
    )
    results |= {
        "partition_runs": float(tally.tried),
        "partition_lost": float(tally.lost),
        "partition_steps_duplicated": float(tally.steps_duplicated),
        "partition_effects_duplicated": float(tally.effects_duplicated),
        "partition_unfenced": float(tally.unfenced + tally.fenced_after_takeover),
    }
