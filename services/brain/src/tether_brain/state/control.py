"""How a run in progress is told to stop (end as `stopped`, with the reason it was given)
or to be handed back (this replica is shutting down: stop at the next boundary, leave the
run to another)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tether_brain.state.kills import RunScope

STOP_REQUESTED = "stop_requested"  # the stop reason of a run someone stopped


@dataclass(slots=True)
class Control:
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    handback: asyncio.Event = field(default_factory=asyncio.Event)
    # Whose run it is, for the kill switch to find the runs it covers (None: not known).
    scope: RunScope | None = None
    # The stop reason the run ends with once `stop` is set (`halt`).
    why: str = STOP_REQUESTED

    def halt(self, why: str = STOP_REQUESTED) -> None:
        """Stop at the next boundary (a model stream is cut at once); the first reason
        given stands."""
        if not self.stop.is_set():
            self.why = why
            self.stop.set()

    @property
    def stop_reason(self) -> str | None:
        """Why the run must stop, once told to; None until then."""
        return self.why if self.stop.is_set() else None

    async def wait_any(self) -> None:
        stop = asyncio.ensure_future(self.stop.wait())
        handback = asyncio.ensure_future(self.handback.wait())
        try:
            await asyncio.wait({stop, handback}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            handback.cancel()
