"""The task group that advances runs on this replica: one task per run with its control
(stop, hand back), the lease hold it started under, fencing (cancel at once, forget), and
handing every run back at shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from tether_brain.persistence.store import RunStore
from tether_brain.runs.leases import Leases
from tether_brain.state.control import Control
from tether_brain.state.kills import RunScope
from tether_brain.state.run import RunState
from tether_common.metrics import runs_fenced

log = logging.getLogger(__name__)

Advance = Callable[[Control], Coroutine[Any, Any, None]]  # a run's work, told by its control

# How often this replica may fence a run (its own hold lapsed: a stall) and take it back
# without the claim counting as a takeover (`RunLeases.claim_orphans`).
FORGIVEN_STALLS = 3
STALLS_KEPT = 10_000  # runs whose stalls are remembered (the oldest are forgotten first)


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class RunTasks:
    def __init__(self, store: RunStore, leases: Leases, *, drain_s: float) -> None:
        self.store = store
        self.leases = leases
        self.drain_s = drain_s
        self.owner = replica_id()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._controls: dict[str, Control] = {}
        self._fenced: set[asyncio.Task[None]] = set()  # cancelled, still winding down
        self._stalls: dict[str, int] = {}  # run id -> times fenced here since a task of it ended
        runs_fenced.add(0)  # the series exists from the start: its panel reads 0, not "no data"

    def held(self) -> list[str]:
        """The runs advancing here."""
        return list(self._tasks)

    def holds(self, run_id: str) -> bool:
        return run_id in self._tasks

    def control(self, run_id: str) -> Control | None:
        return self._controls.get(run_id)

    def spawn(
        self,
        state: RunState,
        advance: Advance,
        *,
        leased_at: float,
        stop: str | None = None,
    ) -> None:
        """Advance the run in a task of its own; `leased_at` is when the request that gave
        us its lease was sent (the fence counts from there); `stop`: the reason it is to
        stop with at its first boundary."""
        self.leases.taken(state.run_id, leased_at)
        control = self._controls.setdefault(state.run_id, Control(scope=RunScope.of(state)))
        if stop is not None:
            control.halt(stop)
        task = asyncio.create_task(advance(control), name=f"run:{state.run_id}")
        self._tasks[state.run_id] = task

        def forget(task: asyncio.Task[None]) -> None:
            if self._tasks.get(state.run_id) is not task:
                return  # the run was resumed by a newer task (a decision already there)
            self._tasks.pop(state.run_id, None)
            self._controls.pop(state.run_id, None)
            self._stalls.pop(state.run_id, None)  # it ended, parked or was handed back
            self.leases.forget(state.run_id)
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.error("run task %s died: %r (its lease will lapse)", state.run_id, exc)

        task.add_done_callback(forget)

    def halt(self, where: Callable[[RunScope], bool], why: str) -> list[str]:
        """Tell every run advancing here whose scope `where` admits to stop with `why`
        (at its next boundary; a model stream is cut at once); the runs told."""
        told = []
        for run_id, control in self._controls.items():
            if control.scope is not None and where(control.scope) and not control.stop.is_set():
                control.halt(why)
                told.append(run_id)
        return told

    def let_go(self, run_id: str) -> None:
        """The calling run task's commit gave the lease up (parked, ended, handed back):
        its hold is forgotten, unless a newer task of the run already holds it (a
        decision resumed the run while this one was still winding down; forgetting then
        would leave that task renewed but never fenced here)."""
        if self._tasks.get(run_id) is asyncio.current_task():
            self.leases.forget(run_id)

    def fence(self, run_ids: list[str], *, why: str) -> None:
        """Stop acting on these runs at once: cancel their tasks (a commit in flight is
        refused by the database once the lease is out) and forget them, so nothing more
        is committed or published for them here."""
        for run_id in run_ids:
            age = self.leases.age(run_id)
            self.leases.forget(run_id)
            self._stalled(run_id)
            self._controls.pop(run_id, None)
            task = self._tasks.pop(run_id, None)
            if task is None:
                continue
            task.cancel()
            self._fenced.add(task)
            task.add_done_callback(self._fenced.discard)
            runs_fenced.add(1)
            log.warning(
                "fenced run %s: its lease was last set %.2f s ago here; %s",
                run_id,
                age or 0.0,
                why,
                extra={"run_id": run_id},
            )

    def stalling(self) -> list[str]:
        """Runs fenced here too often to be taken back here uncounted: whatever stalls
        this replica each time it holds one still ends (`repeated_crash`)."""
        return [run_id for run_id, count in self._stalls.items() if count > FORGIVEN_STALLS]

    def _stalled(self, run_id: str) -> None:
        self._stalls[run_id] = self._stalls.pop(run_id, 0) + 1  # now the newest
        if len(self._stalls) > STALLS_KEPT:
            del self._stalls[next(iter(self._stalls))]

    async def hand_back(self) -> None:
        """Graceful: every run stops at its next boundary and is handed back for another
        replica to continue at once; what does not finish in time is cancelled (its lease
        then expires and it is taken over)."""
        await asyncio.gather(*self._fenced, return_exceptions=True)
        held = dict(self._tasks)
        for control in self._controls.values():
            control.handback.set()
        if held:
            _, pending = await asyncio.wait(held.values(), timeout=self.drain_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*held.values(), return_exceptions=True)
        for run_id in held:
            await self.store.leases.release(run_id, self.owner)
