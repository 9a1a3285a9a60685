"""What the brain replicas' logs say about a chaos run (bench/chaos.py): when each run was
taken over and by which replica, and that replica's event-loop stalls
(tether_common.looplag) and slow adoption sweeps (tether_brain.runs.maintenance) between a
kill and a late claim, so a late claim can be put down to a stalled loop or a slow sweep;
and both over the whole run."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

STALL = "event loop stalled"
SLOW_SWEEP = "adoption sweep woke"
TAKEOVER = "taking over run"


@dataclass(frozen=True, slots=True)
class Line:
    at: datetime
    replica: str  # the log file's name without `.log` (a restarted replica's too)
    entry: dict[str, Any]

    @property
    def msg(self) -> str:
        return str(self.entry.get("msg", ""))

    def number(self, key: str) -> float:
        value = self.entry.get(key)
        return float(value) if isinstance(value, int | float) else 0.0


@dataclass(frozen=True, slots=True)
class Claim:
    at: datetime
    replica: str


def brain_lines(logs: Path) -> list[Line]:
    """The JSON lines of every brain replica's log that matter here, oldest first."""
    found: list[Line] = []
    for log_file in sorted(logs.glob("brain*.log")):
        for text in log_file.read_text(errors="replace").splitlines():
            if not any(key in text for key in (STALL, SLOW_SWEEP, TAKEOVER)):
                continue
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entry = json.loads(text)
                found.append(Line(datetime.fromisoformat(entry["ts"]), log_file.stem, entry))
    return sorted(found, key=lambda line: line.at)


def claims(lines: list[Line]) -> dict[str, list[Claim]]:
    """When each run was taken over, by which replica (its `taking over run` lines)."""
    found: dict[str, list[Claim]] = defaultdict(list)
    for line in lines:
        if line.msg.startswith(TAKEOVER):
            with contextlib.suppress(IndexError):
                found[line.msg.split()[3]].append(Claim(line.at, line.replica))
    return dict(found)


def between(lines: list[Line], replica: str, since: datetime, until: datetime) -> str:
    """What `replica` logged about its loop and its sweeps from `since` to `until`."""
    seen = [line for line in lines if line.replica == replica and since <= line.at <= until]
    stalls = [line for line in seen if line.msg.startswith(STALL)]
    sweeps = [line for line in seen if line.msg.startswith(SLOW_SWEEP)]
    said = []
    if stalls:
        said.append(
            f"loop stalled {len(stalls)}x, {sum(s.number('lag_s') for s in stalls):.2f} s "
            f"(its thread on CPU {sum(s.number('on_cpu_s') for s in stalls):.2f} s, "
            f"waiting for one {sum(s.number('waiting_s') for s in stalls):.2f} s, "
            f"off CPU {sum(s.number('off_cpu_s') for s in stalls):.2f} s)"
        )
    if sweeps:
        late = max(s.number("sweep_late_s") for s in sweeps)
        took = max(s.number("sweep_took_s") for s in sweeps)
        said.append(f"{len(sweeps)} slow sweeps (woke up to {late:.2f} s late, took {took:.2f} s)")
    return "; ".join(said) or "no stall or slow sweep logged"


def stall_summary(lines: list[Line]) -> str:
    """All replicas' loop stalls and slow sweeps over the run: how many, the worst, and
    where the stalls' time went."""
    stalls = [line for line in lines if line.msg.startswith(STALL)]
    sweeps = [line for line in lines if line.msg.startswith(SLOW_SWEEP)]
    said = f"brain loop stalls logged: {len(stalls) or 'none'}"
    if stalls:
        worst = max(stalls, key=lambda s: s.number("lag_s"))
        said += (
            f", worst {worst.number('lag_s'):.2f} s ({worst.replica}); all together "
            f"{sum(s.number('lag_s') for s in stalls):.1f} s, the loop's thread on CPU "
            f"{sum(s.number('on_cpu_s') for s in stalls):.1f} s, waiting for one "
            f"{sum(s.number('waiting_s') for s in stalls):.1f} s, off CPU "
            f"{sum(s.number('off_cpu_s') for s in stalls):.1f} s"
        )
    said += f"\nslow adoption sweeps logged: {len(sweeps) or 'none'}"
    if sweeps:
        said += (
            f", woke up to {max(s.number('sweep_late_s') for s in sweeps):.2f} s late, took "
            f"up to {max(s.number('sweep_took_s') for s in sweeps):.2f} s"
        )
    return said
