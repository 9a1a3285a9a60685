"""The one retry policy: its waits double to a cap, jittered within the upper half of the
nominal wait; `retrying()` retries only what it is told to, as often as the policy says,
honours a wait the failure asks for, logs each wait without the failure's message, and
raises the last failure as it was."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import pytest

from tether_common.errors import ErrorCode, TetherError
from tether_common.retrying import (
    BUS_CONNECT,
    DB_MIGRATE,
    On,
    Policy,
    delay_s,
    retrying,
)


class Sleeps:
    """A sleep that records and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Flaky:
    """Fails with `failure` the first `times` calls, then answers `ok`."""

    def __init__(self, failure: BaseException, times: int) -> None:
        self.failure, self.times, self.calls = failure, times, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.failure
        return "ok"


async def run(
    policy: Policy,
    flaky: Flaky,
    sleep: Callable[[float], Awaitable[None]],
    on: On,
    asked: Callable[[BaseException], float | None] | None = None,
) -> str:
    async for attempt in retrying(policy, on=on, sleep=sleep, asked=asked):
        with attempt:
            return await flaky()
    raise AssertionError("unreachable")


def test_waits_without_jitter_double_to_the_cap() -> None:
    policy = Policy("p", 0.1, 1.0, jitter=False)
    assert [delay_s(policy, n) for n in range(7)] == pytest.approx(
        [0.1, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    )


@pytest.mark.parametrize(("initial", "cap"), [(0.5, 30.0), (2.0, 600.0), (1.0, 5.0)])
@pytest.mark.parametrize("failures", [1, 2, 3, 5, 8, 40])
def test_jittered_waits_stay_in_the_upper_half_of_the_nominal_one(
    initial: float, cap: float, failures: int
) -> None:
    nominal = min(cap, initial * 2 ** (failures - 1))
    waits = [delay_s(Policy("p", initial, cap), failures) for _ in range(300)]
    assert all(nominal / 2 <= wait <= nominal for wait in waits)
    # Spread over that half (replicas do not come back together), not pinned to a point.
    assert max(waits) - min(waits) > nominal / 4


@pytest.mark.parametrize(
    ("policy", "attempts", "total_s"),
    [(BUS_CONNECT, 60, (55.0, 60.0)), (DB_MIGRATE, 30, (50.0, 56.0))],
)
def test_the_start_up_policies_wait_about_a_minute(
    policy: Policy, attempts: int, total_s: tuple[float, float]
) -> None:
    assert policy.attempts == attempts
    waited = sum(delay_s(policy, n) for n in range(1, attempts))
    assert total_s[0] <= waited <= total_s[1]


async def test_a_matching_failure_is_retried_until_the_attempts_run_out() -> None:
    failure = TetherError("down", code=ErrorCode.NO_RESPONDERS)
    flaky, sleep = Flaky(failure, times=10), Sleeps()
    with pytest.raises(TetherError) as raised:
        await run(Policy("p", 0.1, 0.3, jitter=False, attempts=4), flaky, sleep, on=TetherError)
    assert raised.value is failure  # the last failure, as it was
    assert flaky.calls == 4
    assert sleep.delays == pytest.approx([0.1, 0.2, 0.3])


async def test_a_success_after_failures_is_returned() -> None:
    flaky, sleep = Flaky(ConnectionError("refused"), times=2), Sleeps()
    assert await run(Policy("p", 0.1, 1.0, attempts=5), flaky, sleep, on=OSError) == "ok"
    assert flaky.calls == 3
    assert len(sleep.delays) == 2


@pytest.mark.parametrize(
    "on",
    [ValueError, (ValueError, KeyError), lambda failure: isinstance(failure, ValueError)],
    ids=["type", "types", "predicate"],
)
async def test_any_other_failure_is_raised_at_once(on: On) -> None:
    flaky, sleep = Flaky(RuntimeError("broken contract"), times=1), Sleeps()
    with pytest.raises(RuntimeError):
        await run(Policy("p", 0.1, 1.0, attempts=5), flaky, sleep, on=on)
    assert flaky.calls == 1
    assert sleep.delays == []


@pytest.mark.parametrize(
    ("asked", "bounds"),
    [
        # The asked wait (a `Retry-After`), plus up to `initial_s` of jitter, every time.
        (3.0, [(3.0, 3.5)] * 3),
        (0.0, [(0.0, 0.5)] * 3),
        # Nothing asked: the back-off.
        (None, [(0.25, 0.5), (0.5, 1.0), (0.5, 1.0)]),
    ],
)
async def test_a_wait_the_failure_asks_for_replaces_the_back_off(
    asked: float | None, bounds: list[tuple[float, float]]
) -> None:
    flaky, sleep = Flaky(ValueError("rate limited"), times=3), Sleeps()
    await run(Policy("p", 0.5, 1.0), flaky, sleep, on=ValueError, asked=lambda _: asked)
    assert len(sleep.delays) == 3
    assert all(low <= d <= high for d, (low, high) in zip(sleep.delays, bounds, strict=True))


async def test_a_time_budget_refuses_a_retry_that_would_start_past_it() -> None:
    # Tries at about 0, 0.2 and 0.4 s; a fourth would start at 0.6, past the 0.5 s budget.
    policy = Policy("p", 0.2, 0.2, jitter=False, within_s=0.5)
    flaky = Flaky(ValueError("nobody listens"), times=100)
    started = time.monotonic()
    with pytest.raises(ValueError, match="nobody listens"):
        await run(policy, flaky, asyncio.sleep, on=ValueError)
    assert 2 <= flaky.calls <= 3
    assert time.monotonic() - started < 0.5


async def test_each_wait_is_logged_with_the_code_never_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failure = TetherError("key sk-SECRET refused", code=ErrorCode.PROVIDER_AUTH)
    caplog.set_level(logging.INFO, logger="tether_common.retrying")
    with pytest.raises(TetherError):
        await run(
            Policy("calling x", 0.1, 1.0, attempts=3), Flaky(failure, 9), Sleeps(), on=TetherError
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "tether_common.retrying"]
    assert len(lines) == 2
    assert lines[0].startswith("calling x: provider_auth; retry 1 of 2 in ")
    assert not any("SECRET" in line for line in lines)
