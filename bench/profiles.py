"""`python -m bench --profile`: every service of every stack runs under cProfile
(`TETHER_PROFILE_DIR`), and when the stack stops the top functions of each service are
printed, so a regression shows where it went. Figures measured with it on are inflated
(cProfile about doubles the cost of Python code): compare profiles, not timings."""

from __future__ import annotations

import os
import shutil
import signal
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from tether_common.profiling import report


@dataclass(slots=True)
class Switch:
    """Set once by `__main__` from the command line; off by default."""

    top: int = 0  # functions listed per service and ranking; 0: profiling off

    @property
    def on(self) -> bool:
        return self.top > 0


SWITCH = Switch()
# A folder to copy each stack's raw profiles into before the stack's folder goes.
KEEP_ENV = "TETHER_BENCH_KEEP_PROFILES"


def profile_env(base: Path) -> dict[str, str]:
    """What a stack's services need in their environment to profile themselves."""
    # The standard event loop while profiling: its wait is a Python call (`select`) that
    # the report counts as idle; libuv's wait is invisible to cProfile, so under uvloop
    # idle time would read as busy.
    on = {"TETHER_PROFILE_DIR": str(base / "profiles"), "TETHER_EVENT_LOOP": "asyncio"}
    return on if SWITCH.on else {}


def restart_profiles(pids: list[int]) -> None:
    """Profiles from here on only (tether_common.profiling: SIGUSR1), so the services'
    start-up is left out of what the benchmark measures."""
    if SWITCH.on:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)


def print_profiles(base: Path) -> None:
    """The report of each service whose processes wrote a profile under `base`."""
    folder = base / "profiles"
    if not SWITCH.on or not folder.is_dir():
        return
    by_service: dict[str, list[Path]] = {}
    for path in sorted(folder.glob("*.prof")):
        by_service.setdefault(path.stem.rsplit("-", 1)[0], []).append(path)
    for service, paths in by_service.items():
        print(report(service, paths, SWITCH.top), flush=True)
    if keep := os.environ.get(KEEP_ENV):  # for pstats' callers and callees views
        Path(keep).mkdir(parents=True, exist_ok=True)
        for path in folder.glob("*.prof"):
            shutil.copy(path, Path(keep) / f"{base.name}-{path.name}")
