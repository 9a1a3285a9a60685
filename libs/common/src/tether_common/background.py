"""Background loops of the services (sweepers, collectors, reloads): a body repeated on an
interval until cancelled, whose failures never end the loop and never flood the log.

A failure is logged once in full (with its traceback), then at most once a `quiet_s` while
it keeps failing, and its end once; so a dependency that is down for an hour costs a few
log lines, not thousands of tracebacks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


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
