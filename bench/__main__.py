"""`python -m bench [--quick] [SUB-COMMAND ...]`: benchmarks that print figures.

Sub-commands: floor, loop (= concurrency + long + resume), concurrency, long, resume,
parked, approvals, langgraph, runner, outputs, scaling, shellfuzz, models, chaos, all (the default;
`make bench`; chaos is not part of it).
Each starts its own nats-server and PostgreSQL in a temporary folder and the services as
real processes; nothing is shared with a running system. Each is bounded in time; a
sub-command that runs out of time or fails is reported and the others still run.
`--quick` scales the counts down (see `bench.suites.QUICK`). `--profile [N]` runs the
services under cProfile and prints each one's top N functions as its stack stops
(`bench.profiles`; timings taken with it on are inflated).
At the end, issue 33's figures with their targets and met/missed (`bench.targets`), also
written as markdown with the date and commit under bench/results/ for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
import traceback

from bench.profiles import SWITCH
from bench.stack import OPERATOR_TOKEN
from bench.suites import ALL, QUICK, SUITES, Counts, Results, print_summary

# parked: 10,000 runs at about 60 runs/s; shellfuzz: one sandbox per allowed command.
# chaos: 100 kills, each replica restarted, then the runs settled (and the partitions).
TIME_LIMIT_S = {"models": 7200.0, "parked": 900.0, "shellfuzz": 1800.0, "chaos": 3600.0}
DEFAULT_LIMIT_S = 300.0


async def run_one(name: str, counts: Counts, results: Results, loads: list[float]) -> None:
    # Other work on the machine skews every figure: say how busy it was.
    loads.append(os.getloadavg()[0])
    print(f"\n== {name} ==  (load average {loads[-1]:.1f})", flush=True)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(TIME_LIMIT_S.get(name, DEFAULT_LIMIT_S)):
            await SUITES[name](counts, results)
    except TimeoutError:
        print(f"{name}: out of time, skipped")
    except Exception:  # one failing benchmark must not hide the others' figures
        traceback.print_exc()
        print(f"{name}: failed")
    took = time.perf_counter() - started
    loads.append(os.getloadavg()[0])
    print(f"({name}: {took:.0f} s; load average {loads[-1]:.1f})", flush=True)


async def main(names: list[str], counts: Counts) -> None:
    results: Results = {}
    loads: list[float] = []
    for name in names:
        await run_one(name, counts, results, loads)
    print_summary(results, loads)


def parse() -> tuple[list[str], Counts]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    # No `choices=`: Python 3.11's argparse rejects an empty `nargs="*"` list against them.
    parser.add_argument("commands", nargs="*", metavar="SUB-COMMAND")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument(
        "--profile",
        nargs="?",
        type=int,
        const=15,
        default=0,
        metavar="N",
        help="run the services under cProfile; print each one's top N functions (15)",
    )
    args = parser.parse_args()
    SWITCH.top = max(0, args.profile)
    commands = args.commands or ["all"]
    if unknown := set(commands) - {*SUITES, "all"}:
        parser.error(f"unknown sub-command {sorted(unknown)}; choose from {[*SUITES, 'all']}")
    names = [n for c in commands for n in (ALL if c == "all" else (c,))]
    counts = QUICK if args.quick else Counts()
    print(f"counts: {counts}")
    return names, counts


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)  # the bus's reconnect chatter is not a figure
    # Every client the benchmarks make speaks as the stacks' bootstrap operator (the
    # brain's API refuses anonymous callers); a token already set is left alone.
    os.environ.setdefault("TETHER_TOKEN", OPERATOR_TOKEN)
    asyncio.run(main(*parse()))
