"""How a run in progress is told to stop (end as `stopped`) or to be handed back (this
replica is shutting down: stop at the next boundary, leave the run to another)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(slots=True)
class Control:
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    handback: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_any(self) -> None:
        stop = asyncio.ensure_future(self.stop.wait())
        handback = asyncio.ensure_future(self.handback.wait())
        try:
            await asyncio.wait({stop, handback}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            handback.cancel()
