"""The loop's clock: how long a run has been active (its `max_seconds`) is measured on
it. `SYSTEM_CLOCK` is the real one; `tether_brain.testing.FakeClock` moves only when told
(or when something sleeps on it), so a time limit is tested in milliseconds."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
