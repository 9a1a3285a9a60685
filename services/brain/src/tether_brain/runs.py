"""Starting, reading, stopping and messaging runs; owns the tasks that advance them."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from tether_brain.loop import Loop
from tether_brain.settings import STEP_CEILING, BrainSettings
from tether_brain.state import RunState
from tether_brain.store import RunStore
from tether_common.bus import Bus
from tether_common.errors import ConflictError
from tether_common.messages.base import decode
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    QueueMessage,
    RunAccepted,
    RunEvent,
    RunView,
    StartRun,
    StopRun,
)
from tether_common.metrics import runs_started

log = logging.getLogger(__name__)


class RunManager:
    def __init__(self, bus: Bus, store: RunStore, loop: Loop, settings: BrainSettings) -> None:
        self.bus = bus
        self.store = store
        self.loop = loop
        self.settings = settings
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Event] = {}

    async def start(self, req: StartRun) -> RunAccepted:
        now = datetime.now(UTC)
        options = req.model_dump(
            include={"agent", "allow_shell", "allow_web", "mode"}, exclude_none=True
        )
        state = RunState(
            run_id=f"run_{uuid.uuid4().hex}",
            prompt=req.prompt,
            provider=req.provider or self.settings.provider,
            model=req.model or self.settings.model,
            max_steps=min(req.max_steps or self.settings.max_steps, STEP_CEILING),
            created_at=now,
            updated_at=now,
            options=options,
        )
        await self.store.create(state)
        runs_started.add(1, {"provider": state.provider})
        self._spawn(state)
        return RunAccepted(run_id=state.run_id, status=state.status)

    def _spawn(self, state: RunState) -> None:
        stop = self._stops.setdefault(state.run_id, asyncio.Event())
        task = asyncio.create_task(self.loop.run(state, stop), name=f"run:{state.run_id}")
        self._tasks[state.run_id] = task

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(state.run_id, None)
            self._stops.pop(state.run_id, None)

        task.add_done_callback(forget)

    async def get(self, run_id: str) -> RunView:
        state = await self.store.load(run_id)
        return RunView(
            run_id=state.run_id,
            status=state.status,
            stop_reason=state.stop_reason,
            prompt=state.prompt,
            answer=state.answer,
            provider=state.provider,
            model=state.model,
            steps=state.steps,
            usage=state.usage,
            created_at=state.created_at,
            updated_at=state.updated_at,
        )

    async def stop(self, req: StopRun) -> RunAccepted:
        view = await self.get(req.run_id)
        if view.status in TERMINAL_STATUSES:
            return RunAccepted(run_id=req.run_id, status=view.status)
        stop = self._stops.get(req.run_id)
        if stop is None:
            raise ConflictError(f"run {req.run_id} is not advanced by this replica")
        stop.set()
        return RunAccepted(run_id=req.run_id, status=view.status)

    async def queue_message(self, req: QueueMessage) -> RunAccepted:
        view = await self.get(req.run_id)
        raise ConflictError(
            f"run {req.run_id} ({view.status}) cannot take queued messages yet",
            code="not_supported",
        )

    async def events(self, run_id: str, after: int) -> AsyncIterator[RunEvent]:
        """The run's events after `after`, live until `run.end`."""
        await self.get(run_id)
        async for data in self.bus.replay(self.bus.subjects.run_events(run_id)):
            if data is None:
                if (await self.get(run_id)).status in TERMINAL_STATUSES:
                    return
                continue
            event = decode(RunEvent, data)
            if event.seq > after:
                yield event
            if event.kind == "run.end":
                return

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
