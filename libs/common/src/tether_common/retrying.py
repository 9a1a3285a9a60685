"""The one retry policy: exponential back-off as data (`Policy`), `retrying()` for a
block retried where it stands, and `delay_s()` for the places that store or schedule
their next attempt instead of sleeping (the notice outbox, the MCP supervisor). Every
retry of the services (and of `tether up`'s restarts) goes through here, so its shape,
its cap, its jitter and its log line are decided once; the policies every service shares
are named below, one service's own beside its use.

Built on tenacity rather than stamina (which wraps it): stamina's jitter is additive and
its sleep is fixed, while our waits are drawn from the upper half of the nominal one and
the gateway's tests (and a fake clock) hand in their own sleep; and stamina would add its
own counter to every service's `/metrics`. A retry is logged here, one line per wait.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    stop_before_delay,
    stop_never,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

__all__ = [
    "BUS_CONNECT",
    "DB_MIGRATE",
    "On",
    "Policy",
    "Sleep",
    "delay_s",
    "retrying",
]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
# Which failures to retry: exception types, or a predicate over the failure.
On = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
# The wait a failure asks for itself (an HTTP `Retry-After`), or None for the back-off.
Asked = Callable[[BaseException], float | None]
Describe = Callable[[BaseException], str]


@dataclass(frozen=True, slots=True)
class Policy:
    """Retries of one thing: `initial_s` before the first, doubling up to `max_s`.
    Jittered (the default), each wait is drawn from the upper half of that nominal wait,
    half fixed and half random: replicas that failed together do not come back together,
    and no wait is shorter than half its nominal length. `attempts` counts the tries, the
    first included (None: no limit); `within_s` refuses a retry that would start later
    than that after the first try (None: no limit)."""

    name: str
    initial_s: float
    max_s: float
    jitter: bool = True
    attempts: int | None = None
    within_s: float | None = None

    def wait(self) -> wait_base:
        """The back-off as a tenacity wait (what `delay_s` and `retrying` both use)."""
        if not self.jitter:
            return wait_exponential(multiplier=self.initial_s, max=self.max_s)
        fixed = wait_exponential(multiplier=self.initial_s / 2, max=self.max_s / 2)
        return fixed + wait_random_exponential(multiplier=self.initial_s / 2, max=self.max_s / 2)

    def stop(self) -> stop_base:
        stops: list[stop_base] = []
        if self.attempts is not None:
            stops.append(stop_after_attempt(self.attempts))
        if self.within_s is not None:
            stops.append(stop_before_delay(self.within_s))
        return stop_any(*stops) if stops else stop_never


# Connecting to NATS (nats-py itself waits for a server that is not up yet): what its
# connect still raises is retried for about a minute, then the service fails.
BUS_CONNECT = Policy("connecting to NATS", 0.1, 1.0, jitter=False, attempts=60)
# PostgreSQL starting beside us: a service migrates at start-up, for about a minute.
DB_MIGRATE = Policy("migrating the database", 0.2, 2.0, jitter=False, attempts=30)

# `delay_s` asks a tenacity wait for one value; a wait reads only the state's attempt.
_NO_CALLER = Retrying()


def delay_s(policy: Policy, failures: int) -> float:
    """Seconds to wait after `failures` failed tries in a row (0 counts as 1: a thing
    that ended without failing is retried at the first back-off)."""
    state = RetryCallState(_NO_CALLER, None, (), {})
    state.attempt_number = max(failures, 1)
    return float(policy.wait()(state))


def retrying(
    policy: Policy,
    *,
    on: On,
    sleep: Sleep = asyncio.sleep,
    asked: Asked | None = None,
    describe: Describe | None = None,
    level: int = logging.WARNING,
) -> AsyncRetrying:
    """Tries of a block, `async for attempt in retrying(...): with attempt: ...`: a
    failure matching `on` is retried after the policy's back-off (or the wait `asked`
    names for it, with up to `initial_s` of jitter on top, so replicas told the same
    moment do not stampede); once the policy stops, the last failure is raised as it
    was. Each wait is logged at `level` with `describe(failure)` (by default its error
    code or type, never its message, which may quote a provider's echo of a secret)."""
    return AsyncRetrying(
        sleep=sleep,
        stop=policy.stop(),
        wait=_waiting(policy, asked),
        retry=_retry_on(on),
        before_sleep=_logger(policy, describe or _code_of, level),
        reraise=True,
    )


def _retry_on(on: On) -> retry_if_exception:
    if isinstance(on, type | tuple):
        return retry_if_exception_type(on)
    return retry_if_exception(on)


def _waiting(policy: Policy, asked: Asked | None) -> Callable[[RetryCallState], float]:
    backoff = policy.wait()

    def wait(state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome is not None else None
        wanted = asked(failure) if asked is not None and failure is not None else None
        if wanted is None:
            return float(backoff(state))
        return wanted + random.uniform(0, policy.initial_s)

    return wait


def _logger(policy: Policy, describe: Describe, level: int) -> Callable[[RetryCallState], None]:
    of = f" of {policy.attempts - 1}" if policy.attempts is not None else ""

    def logged(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome is not None else None
        why = describe(failure) if failure is not None else "failed"
        log.log(
            level,
            "%s: %s; retry %d%s in %.2fs",
            policy.name,
            why,
            state.attempt_number,
            of,
            state.upcoming_sleep,
        )

    return logged


def _code_of(failure: BaseException) -> str:
    code = getattr(failure, "code", None)
    return str(code) if code is not None else type(failure).__name__
