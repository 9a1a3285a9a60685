"""How a step's work becomes durable and public: the one commit per step, its events
published after it, and a run's end (committed once, published without ever raising,
the parent told, the tenant's `on_run_end` hooks told)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError

from tether_brain.loop.outcome import Outcome
from tether_brain.persistence.store import StorePort
from tether_brain.state.events import EventsPort, emit, publish, send
from tether_brain.state.run import Entry, RunState
from tether_common.errors import TetherError
from tether_common.messages.events import RunEnd
from tether_common.messages.runs import TERMINAL_STATUSES, ChildEnded, RunStatus
from tether_common.metrics import runs_ended
from tether_common.retrying import Policy, delay_s

log = logging.getLogger(__name__)

REPUBLISH_ATTEMPTS = 8  # a committed end's events, retried over about 2 minutes
REPUBLISH = Policy("republishing a run's end events", 1.0, 30.0, jitter=False)


class Completion:
    def __init__(
        self, bus: EventsPort, store: StorePort, *, told: Callable[[RunState], None] | None = None
    ) -> None:
        self.bus = bus
        self.store = store
        # Told of each end as soon as it commits, before anything else is awaited (a
        # fence or a shutdown cancelling the task later loses nothing): never for an end
        # whose commit failed. The tenant's `on_run_end` hooks (`hooks.Hooks.run_ended`).
        self.told = told
        # Republishing a committed end's events outlives the run's task; held here so
        # that no task is dropped (the events are in the journal whatever happens).
        self._republishing: set[asyncio.Task[None]] = set()

    async def commit(self, state: RunState) -> None:
        """The step's one durable write, then its events: sent, their acks read before
        the run's next commit (or as its task ends: `settle`), so the step goes on to its
        model meanwhile and the events still reach the stream in the order they were
        made. Events are already in the journal, so a failed publish is sent again with
        the next commit's (ids deduplicate)."""
        await self.store.commit(state)
        await self.settle(state)
        state.unpublished += _events_of(state.published)
        if state.status in TERMINAL_STATUSES:
            self._tell(state)
            await self._publish_committed(state)
            return
        try:
            state.sending = await send(self.bus, state.unpublished)
        except TetherError as exc:
            self._not_published(state, exc)
            return
        state.unpublished = []

    async def settle(self, state: RunState) -> None:
        """Read the acks of the events last sent: any not stored go back in front of
        those not sent yet. A task that is being cancelled (a fence, a shutdown) does
        not wait for them; the events are in the journal."""
        sent, state.sending = state.sending, None
        if sent is None:
            return
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            sent.acks.abandon()
            return
        try:
            await sent.acks.confirmed()
        except TetherError as exc:
            state.unpublished[:0] = sent.entries
            self._not_published(state, exc)

    @staticmethod
    def _not_published(state: RunState, exc: TetherError) -> None:
        log.warning(
            "publishing %d events of %s failed: %s",
            len(state.unpublished),
            state.run_id,
            exc.message,
        )

    async def end(
        self, state: RunState, status: RunStatus, reason: str | None, answer: str | None
    ) -> Outcome:
        """End the run with `status` (committed, published, the parent told)."""
        state.status, state.stop_reason, state.answer = status, reason, answer
        _emit_end(state, status, reason, answer)
        await self.commit(state)
        runs_ended.add(1, {"status": status})
        await self._tell_parent(state)
        return Outcome.ENDED

    async def complete(self, state: RunState, answer: str) -> list[str]:
        """End the run `completed` with `answer` unless user messages were queued
        meanwhile: those are returned (nothing ended) for the caller to deliver."""

        def finishing() -> None:
            state.status, state.answer = "completed", answer
            _emit_end(state, "completed", None, answer)

        queued = await self.store.finish_unless_queued(state, finishing)
        await self.settle(state)
        if not queued:
            self._tell(state)
            state.unpublished += _events_of(state.published)
            await self._publish_committed(state)
            runs_ended.add(1, {"status": "completed"})
            await self._tell_parent(state)
        return queued

    def _tell(self, state: RunState) -> None:
        if self.told is not None:
            self.told(state)

    async def end_committed(self, state: RunState) -> bool:
        """Whether the run's end is already committed (read back: a failure may have
        come from the committing statement itself)."""
        try:
            status, _ = await self.store.queries.status(state.run_id)
        except (OSError, DBAPIError, TetherError):
            return False
        return status in TERMINAL_STATUSES

    async def _tell_parent(self, state: RunState) -> None:
        """The child-ended notice, best effort: the end is committed whatever happens
        here, and a notice lost is made up by the maintenance sweep (`parents_ready`)."""
        if state.parent_id is None:
            return
        notice = ChildEnded(parent_id=state.parent_id, child_id=state.run_id)
        try:
            await self.bus.publish(self.bus.subjects.run_child_ended, notice)
        except Exception as exc:  # the sweep resumes the parent
            log.warning("run %s: child-ended notice not sent: %s", state.run_id, exc)

    async def _publish_committed(self, state: RunState) -> None:
        """Publish a committed end's events without ever raising: the end is decided, so
        a failed publish is retried in the background (bounded; the stream deduplicates
        by event id), never turned into a second end."""
        events, state.unpublished = list(state.unpublished), []
        try:
            await publish(self.bus, events)
        except Exception as exc:  # any failure here is only a publish
            log.warning("run %s: end events not published yet: %s", state.run_id, exc)
            task = asyncio.create_task(self._republish(state.run_id, events))
            self._republishing.add(task)
            task.add_done_callback(self._republishing.discard)

    async def _republish(self, run_id: str, events: list[Entry]) -> None:
        for attempt in range(REPUBLISH_ATTEMPTS):
            await asyncio.sleep(delay_s(REPUBLISH, attempt + 1))
            try:
                await publish(self.bus, events)
                return
            except Exception as exc:  # retried, then left to the journal
                log.warning("run %s: republish %d failed: %s", run_id, attempt + 1, exc)
        log.error("run %s: end events left unpublished (they are in the journal)", run_id)


def _emit_end(state: RunState, status: RunStatus, reason: str | None, answer: str | None) -> None:
    emit(
        state,
        RunEnd(
            status=status,
            stop_reason=reason,
            answer=answer,
            output=state.output,  # set only by a typed answer that fits (`answers.py`)
            steps=state.step,
            usage=state.usage.model_dump(exclude={"version"}),
            agent=state.options.agent,
        ),
    )


def _events_of(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.event is not None]
