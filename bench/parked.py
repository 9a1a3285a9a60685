"""Parked runs (issues 3 and 6): what thousands of runs awaiting approval cost the brain,
and how long an operator's decision takes to reach the tool.

Runs are parked the way an operator would see them: an organisation guardrail makes
`convert_time` need confirmation, and a scripted model calls it in its first step.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Any

import httpx
import psutil

from bench.loop import launch
from bench.stack import OPERATOR_TOKEN, Stack
from bench.stats import line
from tether_common.testing import call, say, write_script

PARK_ENV = {
    "TETHER_BRAIN_GUARDRAILS": json.dumps({"convert_time": "confirm"}),
    # Long enough that no request expires while the benchmark is parking thousands.
    "TETHER_BRAIN_APPROVAL_EXPIRY_S": "7200",
    "TETHER_APPROVALS_DEFAULT_EXPIRY_S": "7200",
}
CHUNK = 200


async def park_runs(stack: Stack, count: int) -> tuple[list[str], float]:
    """Start `count` runs that each stop at an approval; returns their ids and runs/s."""
    model = write_script(
        stack.scripts,
        [[call("convert_time", time="09:00", from_timezone="UTC", to_timezone="Asia/Tokyo")],
         say("converted")],
    )  # fmt: skip
    run_ids: list[str] = []
    started = time.perf_counter()
    for first in range(0, count, CHUNK):
        chunk = await launch([stack.api_url], model, min(CHUNK, count - first), 2)
        await stack.wait_status(chunk, ("awaiting_approval",), timeout=600)
        run_ids += chunk
    return run_ids, count / (time.perf_counter() - started)


def rss_mib(stack: Stack) -> float:
    """Resident memory of the brain process in MiB."""
    proc = stack.supervisor.child("brain").proc
    assert proc is not None
    return float(psutil.Process(proc.pid).memory_info().rss) / 2**20


async def measure_parked(stack: Stack, count: int) -> None:
    """RSS of the brain before and after parking `count` runs; and no lease on any."""
    await park_runs(stack, 100)  # warm-up: pools, caches, the approvals client
    await asyncio.sleep(1)
    before = rss_mib(stack)
    _, rate = await park_runs(stack, count)
    await asyncio.sleep(1)
    after = rss_mib(stack)
    held = await stack.db.fetchval(
        "SELECT count(*) FROM runs WHERE status = 'awaiting_approval' "
        "AND (lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL)"
    )
    parked = await stack.db.fetchval("SELECT count(*) FROM runs WHERE status = 'awaiting_approval'")
    rows = await stack.db.fetchval(
        "SELECT pg_total_relation_size('runs') + pg_total_relation_size('run_journal')"
    )
    print(f"parked {count} runs at {rate:.0f} runs/s ({parked} awaiting approval in all)")
    print(f"brain RSS: {before:.1f} MiB before, {after:.1f} MiB after")
    print(f"brain RSS per parked run: {(after - before) * 1024 / count:.2f} KiB")
    print(f"PostgreSQL (runs + journal, all runs): {rows / parked / 1024:.1f} KiB per run")
    print(f"parked runs holding a lease: {held}  (target 0: no task, no lease)")


async def decide_each(
    stack: Stack, approval_ids: list[str], runs: list[str] | None = None
) -> list[float]:
    """One operator deciding one request after another; the wall-clock time of each.
    `runs` (the requests' runs, in order): each decision waits for the run before it to
    end, so no decision shares the machine with the last one's run."""
    url = stack.supervisor.child("approvals").url
    stamps = []
    async with httpx.AsyncClient(
        base_url=url, timeout=30, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    ) as client:
        for i, approval_id in enumerate(approval_ids):
            stamps.append(time.time())
            response = await client.post(
                f"/v1/approvals/{approval_id}/decision",
                json={"decision": "allow_once", "note": "bench"},
            )
            response.raise_for_status()
            if runs is not None:
                await stack.wait_status([runs[i]])
    return stamps


async def measure_approvals(
    stack: Stack, parked: int, decisions: int
) -> tuple[list[float], list[float]]:
    """Park `parked` runs, then decide `decisions` of them one by one, first back to back
    (each POST as soon as the last returned, while that one's run goes on), then each
    once the run before it has ended; the time from each POST to the run's
    `tool.approved` event (stamped after the tool ran, so an upper bound on the tool
    starting) and to its `tool.result`, which is returned for both: back to back, a
    decision shares the machine's two cores with the last one's run (its tool, its
    model's next step, its end); alone, it is the decision's own path."""
    run_ids, _ = await park_runs(stack, parked)
    asked = await stack.event_data(run_ids[: 2 * decisions], "tool.approval_needed")
    print(f"{parked} runs parked; {decisions} decided one after another over HTTP")
    back_to_back = await _decided(stack, run_ids[:decisions], asked, paced=False)
    print(f"then {decisions} more, each once the run before it had ended")
    alone = await _decided(stack, run_ids[decisions : 2 * decisions], asked, paced=True)
    return back_to_back, alone


async def _decided(
    stack: Stack, chosen: list[str], asked: dict[str, dict[str, Any]], *, paced: bool
) -> list[float]:
    approval_ids = [asked[r]["data"]["approval_id"] for r in chosen]
    stamps = await decide_each(stack, approval_ids, chosen if paced else None)
    await stack.wait_status(chosen)
    approved = await stack.event_data(chosen, "tool.approved")
    results = await stack.event_data(chosen, "tool.result")

    def delays(events: dict[str, dict[str, object]]) -> list[float]:
        return [
            (datetime.fromisoformat(str(events[r]["ts"])).timestamp() - t) * 1000
            for r, t in zip(chosen, stamps, strict=True)
        ]

    print(line("decision POST → tool.approved (tool ran)", delays(approved)))
    to_result = delays(results)
    print(line("decision POST → tool.result", to_result))
    await print_phases(stack, approval_ids, stamps)
    return to_result


async def print_phases(stack: Stack, approval_ids: list[str], stamps: list[float]) -> None:
    """Where the time goes, from the approvals service's own timestamps."""
    rows = await stack.db.fetch(
        "SELECT approval_id, decided_at, published_at, consumed_at FROM approvals "
        "WHERE approval_id = ANY($1)",
        approval_ids,
    )
    by_id = {r["approval_id"]: r for r in rows}
    phases: dict[str, list[float]] = {"decided": [], "published": [], "consumed": []}
    for approval_id, stamp in zip(approval_ids, stamps, strict=True):
        row, previous = by_id[approval_id], stamp
        for phase, column in (("decided", "decided_at"), ("published", "published_at"),
                              ("consumed", "consumed_at")):  # fmt: skip
            at = row[column].timestamp()
            phases[phase].append((at - previous) * 1000)
            previous = at
    print(line("  phase: POST → decided_at (approvals commit)", phases["decided"]))
    print(line("  phase: decided_at → published_at (JetStream)", phases["published"]))
    print(line("  phase: published_at → consumed_at (brain)", phases["consumed"]))
    # The approval is spent just before the call goes to the runner: the nearest stamp to
    # the tool starting (`tool.approved` is stamped once it has run).
    spent = [sum(p) for p in zip(*phases.values(), strict=True)]
    print(line("decision POST → consumed_at (the tool starts next)", spent))
