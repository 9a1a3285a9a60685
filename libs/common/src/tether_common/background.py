"""Background loops of the services (sweepers, collectors, reloads): a body repeated on an
interval until cancelled, whose failures never end the loop and never flood the log; and
`Background`, the one group a service starts them in and cancels them with at stop.

A failure is logged once in full (with its traceback), then at most once a `quiet_s` while
it keeps failing, and its end once; so a dependency that is down for an hour costs a few
log lines, not thousands of tracebacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class FailureLog:
    """The log of one repeating task's failures."""

    logger: logging.Logger
    what: str
    quiet_s: float = 60.0
    failures: int = field(default=0, init=False)
    _since: float = field(default=0.0, init=False)
    _said: float = field(default=0.0, init=False)

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        self.failures += 1
        if self.failures == 1:
            self._since = self._said = now
            self.logger.error("%s failed; retrying", self.what, exc_info=exc)
        elif now - self._said >= self.quiet_s:
            self._said = now
            self.logger.warning(
                "%s still failing (%d times in %.0f s): %s",
                self.what,
                self.failures,
                now - self._since,
                exc,
            )

    def recovered(self) -> None:
        if self.failures:
            self.logger.warning(
                "%s works again after %d failures in %.0f s",
                self.what,
                self.failures,
                time.monotonic() - self._since,
            )
        self.failures = 0


async def every(
    interval_s: float, body: Callable[[], Awaitable[object]], failures: FailureLog
) -> None:
    """Run `body`, then wait `interval_s`, until cancelled; failures go to `failures`."""
    while True:
        try:
            await body()
        except Exception as exc:
            failures.failed(exc)
        else:
            failures.recovered()
        await asyncio.sleep(interval_s)


class Background:
    """The background tasks of one service. `start` names each; `stop` cancels them all
    and waits until each has ended. A task that ends by itself before `stop` (a loop
    that should never end) is logged with its exception."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._tasks: dict[asyncio.Task[Any], str] = {}

    def start(self, name: str, work: Coroutine[Any, Any, object]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work, name=name)
        self._tasks[task] = name
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        name = self._tasks.pop(task, None)
        if name is None or task.cancelled():
            return
        if task.exception() is not None:
            self._logger.error("%s ended by an error", name, exc_info=task.exception())
        else:
            self._logger.warning("%s ended by itself", name)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        self._tasks.clear()  # ended by us: `_ended` says nothing
        for task in tasks:
            task.cancel()
        for task, outcome in zip(
            tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True
        ):
            if isinstance(outcome, Exception):
                self._logger.error("%s failed while stopping", task.get_name(), exc_info=outcome)

    def __len__(self) -> int:
        return len(self._tasks)
