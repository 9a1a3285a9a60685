"""Group commit: the step commits of the runs in flight on this brain that arrive while a
flush is under way go together in the next flush, on one pooled connection, in one round
trip (asyncpg's pipelined `fetchmany`: one `COMMIT_STEP` per run, then one Sync), so in
one transaction with one WAL flush for all of them.

Each run keeps its own statement, so its own fence and lease condition and its own
answer: a run fenced out matches no row and gets 0, which fails that run alone. A step is
acknowledged only once the flush carrying it has committed. Nothing waits for a window:
a commit arriving with no flush in flight goes at once (at one run in flight a step
costs what it did alone), and the batch grows only with what queues meanwhile."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_brain.persistence.commits import COMMIT_SQL, StepWrite
from tether_brain.persistence.raw import DRIVER_ERRORS, database_error, driver_of

__all__ = ["MAX_BATCH", "GroupCommit"]

log = logging.getLogger(__name__)

# Steps in one flush at most: more in flight wait for the next (bounds the row locks one
# transaction holds, and the parameters of one pipeline).
MAX_BATCH = 128

Connect = Callable[[], AbstractAsyncContextManager[AsyncConnection]]


@dataclass(slots=True)
class _Waiting:
    write: StepWrite
    done: asyncio.Future[int]


class GroupCommit:
    """Commits `StepWrite`s, several runs' in one transaction when they queue together.
    `connect` gives a pooled connection that runs each statement alone (autocommit)."""

    def __init__(self, connect: Connect, max_batch: int = MAX_BATCH) -> None:
        self._connect = connect
        self._max = max_batch
        self._queue: list[_Waiting] = []
        # The one flush task (held here, so never dropped); None while nothing is queued.
        self._flusher: asyncio.Task[None] | None = None

    async def commit(self, write: StepWrite) -> int:
        """The run rows `write` updated, 0 (fenced out, or its lease ran out) or 1, once
        committed. A caller cancelled before its flush starts writes nothing; one
        cancelled during it may still have committed (as with any statement in flight)."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(write, done))
        if self._flusher is None:
            # In a context of its own: the flush belongs to no one run (nor its trace).
            self._flusher = asyncio.create_task(
                self._drain(), name="group-commit", context=contextvars.Context()
            )
        return await done

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._max]
                del self._queue[: self._max]
                live = [w for w in batch if not w.done.done()]  # not cancelled meanwhile
                if live:
                    await self._flush(live)
        finally:
            self._flusher = None
            for waiting in self._queue:  # only if this task was cancelled (loop shutdown)
                waiting.done.cancel()
            self._queue.clear()

    async def _flush(self, batch: list[_Waiting]) -> None:
        """One checkout, one pipeline, one transaction; every waiter resolved whatever
        happens (a connection lost fails all of them: none is acknowledged)."""
        # Row locks taken in one order (the lease renewal's too, `leases.RENEW_SQL`), so
        # a flush never deadlocks with a renewal on this replica.
        batch.sort(key=lambda w: str(w.write.params["run_id"]))
        try:
            async with self._connect() as conn:
                found = await _execute(conn, batch)
        except BaseException as exc:
            for waiting in batch:
                _fail(waiting, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for waiting, result in zip(batch, found, strict=True):
            if isinstance(result, BaseException):
                _fail(waiting, result)
            elif not waiting.done.done():
                waiting.done.set_result(result)


async def _execute(conn: AsyncConnection, batch: list[_Waiting]) -> list[int | BaseException]:
    """Each write's answer, in order. The batch commits as one transaction; if a
    statement of it fails (a deadlock with another replica's flush, a value refused),
    the whole batch rolled back, and each write is run again alone, so that only the
    failing one fails."""
    driver = await driver_of(conn)
    try:
        if len(batch) == 1:  # one run in flight: the plain prepared statement
            return [int(await driver.fetchval(COMMIT_SQL, *batch[0].write.args()))]
        rows = await driver.fetchmany(COMMIT_SQL, [w.write.args() for w in batch])
    except DRIVER_ERRORS as exc:
        error = await database_error(conn, driver, COMMIT_SQL, exc)
        if error.connection_invalidated or not isinstance(exc, asyncpg.PostgresError):
            raise error from exc  # the outcome is unknown: nobody is told it committed
        if len(batch) == 1:
            return [error]
        log.warning("a group commit of %d steps failed (%s); each again alone", len(batch), exc)
        return await _one_by_one(conn, driver, [w.write for w in batch])
    return [int(r[0]) for r in rows]


async def _one_by_one(
    conn: AsyncConnection, driver: asyncpg.Connection, writes: list[StepWrite]
) -> list[int | BaseException]:
    """Each write in its own transaction; once the connection breaks, the rest fail
    with it (those already answered keep their answers: they committed)."""
    found: list[int | BaseException] = []
    broken: BaseException | None = None
    for write in writes:
        if broken is not None:
            found.append(broken)
            continue
        try:
            found.append(int(await driver.fetchval(COMMIT_SQL, *write.args())))
        except DRIVER_ERRORS as exc:
            error = await database_error(conn, driver, COMMIT_SQL, exc)
            found.append(error)
            broken = error if error.connection_invalidated else None
    return found


def _fail(waiting: _Waiting, exc: BaseException) -> None:
    if waiting.done.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        waiting.done.cancel()
    else:
        waiting.done.set_exception(exc)
