"""What one claim of a schedule does, decided from its row, its due ticks and whether its
last run is still going: which tick (if any) starts a run, what is queued, what is
skipped, and where `next_fire_at` moves. A pure function, so the rules are tested alone.

The rules:
- **Missed ticks.** A due tick more than `grace_s` late was missed (no brain was running,
  or none could reach the database). Only the latest due tick can be on time. Catch-up
  `skip`: missed ticks start nothing; the latest starts a run if it is on time.
  `run_once`: whatever was missed, one run starts, for the latest due tick, and stands
  for all of them (`covers`).
- **Overlap**, while the schedule's last run has not ended (parked runs have not):
  `allow` starts another run; `skip` drops the tick; `queue` keeps it (one tick at most:
  a tick that finds one already queued is dropped, so a schedule that keeps overrunning
  builds no backlog) and starts it once the last run has ended.
- At most one run starts per claim; every due tick is consumed (fired, queued or
  skipped), and `next_fire_at` becomes the first tick after now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tether_brain.schedules.timing import Due


@dataclass(frozen=True, slots=True)
class Plan:
    fire: datetime | None  # the tick that starts a run now
    covers: int  # how many ticks that run stands for
    pending: datetime | None  # the tick queued after this claim
    skipped: int  # ticks dropped by this claim
    next_fire_at: datetime | None  # None: unchanged (nothing was due)


def plan(
    *,
    due: Due | None,
    pending: datetime | None,
    busy: bool,
    overlap: str,
    catch_up: str,
    grace_s: float,
    now: datetime,
) -> Plan:
    fire: datetime | None = None
    covers = skipped = 0
    if pending is not None and not busy:
        fire, covers, pending, busy = pending, 1, None, True
    if due is None:
        return Plan(fire, covers, pending, skipped, None)
    tick: datetime | None = None
    if catch_up == "run_once" or due.on_time(now, grace_s):
        tick = due.latest
        ticks = due.count if catch_up == "run_once" else 1
        skipped += due.count - ticks
    else:
        ticks = 0
        skipped += due.count
    if tick is not None:
        if not busy or (overlap == "allow" and fire is None):
            fire, covers = tick, ticks
        elif overlap == "queue" and pending is None:
            pending = tick
        else:
            skipped += ticks
    return Plan(fire, covers, pending, skipped, due.following)
