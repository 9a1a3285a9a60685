"""A clock that moves only when told, or when something sleeps on it (a script's
`pause_s`): a run's active time, and so its `max_seconds`, is tested in milliseconds."""

from __future__ import annotations

import asyncio


class FakeClock:
    """On the `state.clock.Clock` protocol."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        """The time passes at once; other tasks still get their turn."""
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)
