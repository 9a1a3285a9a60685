"""Brain replicas SIGKILLed at random moments (issue 15): `python -m bench chaos`.

Three brain replicas serve a steady stream of multi-step runs; each step calls
`mcp.chaos.tagged_write`, a non-idempotent MCP tool that appends one line naming its call
to a ledger file before it works (the server of tests/chaos/chaos_mcp_server.py), so
effects are counted outside the system. A random replica is SIGKILLed at a random moment,
`kills` times, and restarted; then every run is read back from the journal and the
ledger: runs tried / lost / ended twice, steps duplicated, effects duplicated, in-doubt
cards, and the takeover time (from a kill to the next commit of each run the killed
replica held, which only another replica can make). In-doubt cards expire after
CARD_EXPIRY_S (expiry counts as "leave it as it is"), so a parked run goes on alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx

from bench.chaos_logs import between, brain_lines, claims, stall_summary
from bench.stack import OPERATOR_TOKEN, Stack
from bench.stats import summary
from tether_client import TetherClient
from tether_client.server.embedded import free_port
from tether_client.server.supervisor import Child
from tether_common.errors import ConfigError, TetherError
from tether_common.testing import Turn, call, say, until, write_script

LEASE_S = 2.0
# The brain adopts orphaned runs every lease_s / 3 (RunManager.run_maintenance).
SWEEP_S = LEASE_S / 3
REPLICAS = 3
IN_FLIGHT = 12  # runs kept going at once
CALLS_PER_RUN = 4  # tool steps per run, then an answer
EFFECT_S = 0.3  # how long each effect takes (a kill often lands mid-call)
CARD_EXPIRY_S = 2.0
KILL_GAP_S = (0.2, 2.0)  # random wait before each kill
SETTLE_S = 180.0
READY_S = 180.0  # a replica (re)started on a busy machine
RESTART_ATTEMPTS = 3
LATE_CLAIMS_SHOWN = 10  # the latest ones, with their replica's stalls and sweeps
PROMPT = "chaos run"
TOOL = "mcp.chaos.tagged_write"
SERVER = Path(__file__).resolve().parents[1] / "tests" / "chaos" / "chaos_mcp_server.py"
TERMINAL = ("completed", "failed", "stopped")

Results = dict[str, float]
Partitions = Callable[[int, Results], Awaitable[None]]


def chaos_env(ledger: Path) -> dict[str, str]:
    # Trusted: its results are our own text, so they do not make later calls ask.
    server = {
        "name": "chaos",
        "command": sys.executable,
        "args": [str(SERVER), str(ledger)],
        "trusted": True,
    }
    return {
        "TETHER_RUNNER_MCP_SERVERS": json.dumps([server]),
        "TETHER_BRAIN_ALLOWLIST": json.dumps([TOOL]),
        "TETHER_BRAIN_LEASE_S": str(LEASE_S),
        "TETHER_BRAIN_APPROVAL_EXPIRY_S": str(CARD_EXPIRY_S),
        "TETHER_DB_POOL_SIZE": "10",
    }


@dataclass(frozen=True, slots=True)
class Kill:
    at: datetime
    orphans: tuple[str, ...]  # runs the killed replica held a lease on


@dataclass
class Chaos:
    """What the driver knows while replicas die under it."""

    stack: Stack
    ready: set[str]  # labels of brain replicas that answer
    rng: random.Random
    kills: list[Kill] = field(default_factory=list)
    failed_starts: int = 0
    retried_starts: int = 0
    slow_restarts: int = 0  # replicas started again after not becoming ready
    done: bool = False

    def brains(self) -> dict[str, Child]:
        return {c.label: c for c in self.stack.supervisor.children if c.spec.name == "brain"}

    def urls(self) -> list[str]:
        return [c.url for label, c in sorted(self.brains().items()) if label in self.ready]


def run_script(scripts: Path, name: str) -> str:
    """CALLS_PER_RUN calls of the effect tool, each tagged with its start and step, then
    an answer: the ledger then says which call ran how often."""
    turns: list[Turn] = [
        [call(TOOL, tag=f"{name}-{k}", seconds=EFFECT_S)] for k in range(CALLS_PER_RUN)
    ]
    return write_script(scripts, [*turns, say(f"done {name}")])


async def start_one(chaos: Chaos, number: int) -> None:
    """Start one run on some live replica; a replica dying under the request is tried
    again elsewhere. A start is not idempotent: one committed but not answered (a
    replica killed, or a reply slower than the timeout) leaves a run the retry does not
    replace, found later in the table. Each attempt has its own script and tags, so two
    such runs are never counted as one call run twice."""
    for attempt in range(5):
        name = f"{number}.{attempt}"
        model = run_script(chaos.stack.scripts, name)
        url = chaos.rng.choice(chaos.urls())
        try:
            async with TetherClient(url, token=OPERATOR_TOKEN, timeout=10) as client:
                await client.start_run(
                    f"{PROMPT} {name}", provider="scripted", model=model, max_steps=10
                )
            return
        except (httpx.HTTPError, TetherError):
            chaos.retried_starts += 1
            await asyncio.sleep(0.2)
    chaos.failed_starts += 1


async def keep_runs_going(chaos: Chaos) -> None:
    """Keep IN_FLIGHT runs unfinished until the kills are over."""
    number = 0
    while not chaos.done:
        live = await chaos.stack.db.fetchval(
            "SELECT count(*) FROM runs WHERE prompt LIKE $1 AND status <> ALL($2)",
            f"{PROMPT} %",
            list(TERMINAL),
        )
        wanted = IN_FLIGHT - int(live)
        starts = [start_one(chaos, number + i) for i in range(max(0, wanted))]
        number += len(starts)
        await asyncio.gather(*starts)
        await asyncio.sleep(0.1)


async def restart(chaos: Chaos, victim: Child) -> None:
    """Start the killed replica again; one that does not become ready is shown (its log's
    last lines), stopped and started once more."""
    supervisor = chaos.stack.supervisor
    for _ in range(RESTART_ATTEMPTS):
        # A fresh port: on a busy machine another process may have taken the old one.
        victim.port = free_port()
        await supervisor.start_child(victim)
        try:
            await supervisor.wait_ready(timeout=READY_S, children=[victim])
        except ConfigError:
            chaos.slow_restarts += 1
            log = chaos.stack.base / "logs" / f"{victim.label}.log"
            tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
            print(
                f"  {victim.label} not ready after {READY_S:.0f} s; log ends:", *tail, sep="\n    "
            )
            await supervisor.stop_child(victim)
            continue
        chaos.ready.add(victim.label)
        return
    raise RuntimeError(f"{victim.label} did not come back in {RESTART_ATTEMPTS} starts")


async def kill_one(chaos: Chaos) -> asyncio.Task[None]:
    """SIGKILL a random live replica (another stays up), note the runs it held, start
    it again in the background (the caller makes sure two are up)."""
    victim = chaos.brains()[chaos.rng.choice(sorted(chaos.ready))]
    chaos.ready.discard(victim.label)
    assert victim.proc is not None
    pid = victim.proc.pid
    victim.proc.kill()
    at = datetime.now(UTC)
    await victim.proc.wait()
    # After the kill, so every lease it held is seen: nobody else can claim a run before
    # its lease runs out.
    held = await chaos.stack.db.fetch(
        "SELECT run_id FROM runs WHERE lease_owner LIKE $1 AND status = 'running'",
        f"%:{pid}:%",
    )
    chaos.kills.append(Kill(at, tuple(r["run_id"] for r in held)))
    return asyncio.create_task(restart(chaos, victim))


async def kill_many(chaos: Chaos, kills: int) -> None:
    restarts: list[asyncio.Task[None]] = []
    for n in range(kills):
        await asyncio.sleep(chaos.rng.uniform(*KILL_GAP_S))
        while len(chaos.ready) < 2:
            pending = {t for t in restarts if not t.done()}
            if not pending:
                raise RuntimeError("fewer than two brain replicas are up, and none is starting")
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        restarts.append(await kill_one(chaos))
        if (n + 1) % 10 == 0:
            print(f"  {n + 1}/{kills} kills", flush=True)
    await asyncio.gather(*restarts)


async def add_replicas(stack: Stack) -> set[str]:
    added = [stack.supervisor.add_replica("brain") for _ in range(REPLICAS - 1)]
    for child in added:
        await stack.supervisor.start_child(child)
    await stack.supervisor.wait_ready(timeout=READY_S, children=added)
    return {c.label for c in stack.supervisor.children if c.spec.name == "brain"}


async def tools_offered(url: str) -> None:
    """Until the brain offers the MCP tool (the runner starts its server in the background)."""
    async with TetherClient(url, token=OPERATOR_TOKEN) as client:

        async def offered() -> bool:
            return TOOL in {t.name for t in await client.tools() if t.available}

        await until(offered, timeout=READY_S, what=f"{TOOL} offered", every=0.2)


async def measure_chaos(stack: Stack, ledger: Path, kills: int, results: Results) -> None:
    """The kills under load, then the tally."""
    await tools_offered(stack.api_url)
    chaos = Chaos(stack, await add_replicas(stack), random.Random())
    print(
        f"{REPLICAS} brain replicas, {IN_FLIGHT} runs in flight of {CALLS_PER_RUN} "
        f"non-idempotent calls each, lease {LEASE_S:g} s; {kills} SIGKILLs"
    )
    driver = asyncio.create_task(keep_runs_going(chaos))
    try:
        await kill_many(chaos, kills)
    finally:
        chaos.done = True
        await driver
    run_ids = [
        r["run_id"]
        for r in await stack.db.fetch("SELECT run_id FROM runs WHERE prompt LIKE $1", f"{PROMPT} %")
    ]
    with contextlib.suppress(TimeoutError):
        await stack.wait_status(run_ids, timeout=SETTLE_S)
    tally = await count(stack, run_ids, ledger, chaos.kills)
    tally.failed_starts = chaos.failed_starts
    print(f"replicas started again after not becoming ready: {chaos.slow_restarts}")
    print(f"starts tried again (no answer in time): {chaos.retried_starts}")
    report(tally, results)


@dataclass
class Tally:
    tried: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    unfinished: Counter[str] = field(default_factory=Counter)  # how the others ended
    ended_twice: int = 0
    steps_duplicated: int = 0
    results_duplicated: int = 0
    effects: int = 0
    effects_duplicated: int = 0
    effects_missing: int = 0  # a call reported ok whose effect never happened
    in_doubt_cards: int = 0
    interrupted: int = 0
    orphans: int = 0
    orphaned_again: int = 0  # its new holder was killed before committing a step
    takeover_ms: list[float] = field(default_factory=list)
    adopted_ms: list[float] = field(default_factory=list)  # kill -> another replica claims it
    # Claims later than lease + sweep after their kill, with what the claimer's log says.
    late_claims: list[tuple[float, str]] = field(default_factory=list)
    stalls: str = ""
    failed_starts: int = 0

    @property
    def lost(self) -> int:
        return self.tried - self.statuses["completed"]


async def count(stack: Stack, run_ids: list[str], ledger: Path, kills: list[Kill]) -> Tally:
    tally = Tally(tried=len(run_ids))
    rows = await stack.db.fetch(
        "SELECT status, stop_reason, step FROM runs WHERE run_id = ANY($1)", run_ids
    )
    tally.statuses.update(r["status"] for r in rows)
    tally.unfinished.update(
        f"{r['status']} ({r['stop_reason']}) at step {r['step']}"
        for r in rows
        if r["status"] != "completed"
    )
    events = await journal(stack, run_ids, "event")
    steps = await journal(stack, run_ids, "step")
    ends = Counter(run for run, e in events if e["kind"] == "run.end")
    tally.ended_twice = sum(1 for n in ends.values() if n > 1)
    tally.steps_duplicated = duplicates(
        (run, s["kind"], s["step"], s.get("call_id")) for run, s in steps
    )
    results = [e["data"] for _, e in events if e["kind"] == "tool.result"]
    tally.results_duplicated = duplicates(
        (run, e["data"]["call_id"]) for run, e in events if e["kind"] == "tool.result"
    )
    tally.interrupted = sum(1 for r in results if r.get("error_code") == "interrupted")
    tally.in_doubt_cards = sum(
        1
        for _, e in events
        if e["kind"] == "tool.approval_needed" and e["data"].get("code") == "in_doubt"
    )
    count_effects(tally, ledger, events)
    await takeovers(stack, tally, kills)
    return tally


async def journal(stack: Stack, run_ids: list[str], kind: str) -> list[tuple[str, Any]]:
    rows = await stack.db.fetch(
        "SELECT run_id, data FROM run_journal WHERE run_id = ANY($1) AND kind = $2 "
        "ORDER BY run_id, seq",
        run_ids,
        kind,
    )
    return [(r["run_id"], json.loads(r["data"])) for r in rows]


def duplicates(keys: Any) -> int:
    return sum(n - 1 for n in Counter(keys).values() if n > 1)


def count_effects(tally: Tally, ledger: Path, events: list[tuple[str, Any]]) -> None:
    """The ledger against the journal: each tag at most once, and every call the journal
    says succeeded ran at least once."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    ran = Counter(line.removeprefix("effect ") for line in lines if line.startswith("effect "))
    tally.effects = sum(ran.values())
    tally.effects_duplicated = sum(n - 1 for n in ran.values() if n > 1)
    tags = {
        e["data"]["call_id"]: e["data"]["arguments"].get("tag")
        for _, e in events
        if e["kind"] == "tool.call" and e["data"].get("name") == TOOL
    }
    ok = {e["data"]["call_id"] for _, e in events if e["kind"] == "tool.result" and e["data"]["ok"]}
    tally.effects_missing = sum(1 for call_id in ok if ran[cast(str, tags.get(call_id))] == 0)


async def takeovers(stack: Stack, tally: Tally, kills: list[Kill]) -> None:
    """For each run a kill orphaned: the time to its next commit, by another replica; and,
    from the replicas' logs, the time until one claimed it (the rest is the run's resumed
    step: the call re-sent under its key, the model turn), and for a claim later than lease
    + sweep, the claimer's loop stalls and slow sweeps meanwhile (bench.chaos_logs)."""
    lines = brain_lines(stack.base / "logs")
    claimed = claims(lines)
    for kill in kills:
        for run_id in kill.orphans:
            later = [c for c in claimed.get(run_id, []) if c.at > kill.at]
            if not later:
                continue
            first = min(later, key=lambda c: c.at)
            after_s = (first.at - kill.at).total_seconds()
            tally.adopted_ms.append(after_s * 1000)
            if after_s > LEASE_S + SWEEP_S:
                said = between(lines, first.replica, kill.at, first.at)
                tally.late_claims.append((after_s, f"{after_s:.2f} s by {first.replica}: {said}"))
    tally.stalls = stall_summary(lines)
    for n, kill in enumerate(kills):
        for run_id in kill.orphans:
            tally.orphans += 1
            after = await stack.db.fetchval(
                "SELECT min(created_at) FROM run_journal WHERE run_id = $1 AND created_at > $2",
                run_id,
                kill.at,
            )
            if after is None:
                continue
            if any(run_id in later.orphans and later.at < after for later in kills[n + 1 :]):
                # Its new holder was killed too before it committed: that kill measures the
                # second takeover; counted here it would span two leases.
                tally.orphaned_again += 1
                continue
            tally.takeover_ms.append((after - kill.at).total_seconds() * 1000)


def report(tally: Tally, results: Results) -> None:
    bound_s = LEASE_S + SWEEP_S + 1.0
    print(f"runs tried {tally.tried} (starts refused: {tally.failed_starts})")
    print(f"  by status: {dict(tally.statuses)}")
    for how, n in tally.unfinished.most_common(5):
        print(f"  {n} {how}")
    print(f"runs lost (not completed) {tally.lost}   ended twice {tally.ended_twice}")
    print(
        f"steps duplicated {tally.steps_duplicated}   tool results duplicated "
        f"{tally.results_duplicated}"
    )
    print(
        f"effects {tally.effects}: duplicated {tally.effects_duplicated}, missing for a call "
        f"reported ok {tally.effects_missing}"
    )
    print(f"in-doubt cards {tally.in_doubt_cards}   calls reported interrupted {tally.interrupted}")
    if tally.takeover_ms:
        p50, p99 = summary(tally.takeover_ms)
        print(
            f"takeover ({tally.orphans} orphaned runs, {len(tally.takeover_ms)} taken over, "
            f"{tally.orphaned_again} orphaned again before their next step): "
            f"p50 {p50 / 1000:.2f} s  p99 {p99 / 1000:.2f} s  (target p99 ≤ lease + sweep + 1 s "
            f"= {bound_s:.2f} s)"
        )
        results["chaos_takeover_p99_s"] = p99 / 1000
    if tally.adopted_ms:
        a50, a99 = summary(tally.adopted_ms)
        print(
            f"  of which claimed by another replica ({len(tally.adopted_ms)} seen in the logs): "
            f"p50 {a50 / 1000:.2f} s  p99 {a99 / 1000:.2f} s  (lease + sweep = "
            f"{LEASE_S + SWEEP_S:.2f} s)"
        )
        results["chaos_adopted_p99_s"] = a99 / 1000
    for _, said in sorted(tally.late_claims, reverse=True)[:LATE_CLAIMS_SHOWN]:
        print(f"  late claim {said}")
    print(tally.stalls)
    results |= {
        "chaos_runs": float(tally.tried),
        "chaos_lost": float(tally.lost),
        "chaos_ended_twice": float(tally.ended_twice),
        "chaos_steps_duplicated": float(tally.steps_duplicated),
        "chaos_effects_duplicated": float(tally.effects_duplicated),
        "chaos_in_doubt_cards": float(tally.in_doubt_cards),
    }
