"""Quota arithmetic (`tether_brain.state.quotas`): the UTC hour and day windows, the
sliding minute of starts, a counter of an earlier window counting nothing, and the
verdict: which limit refuses, its use, and when it resets (the latest of several)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tether_brain.state.quotas import (
    CONCURRENCY_RETRY_S,
    Scope,
    Spent,
    Use,
    exceeded,
    refusal,
    usage,
    window_end,
    window_start,
)
from tether_common.errors import ErrorCode, QuotaExceededError
from tether_common.messages.quotas import Quota

NOW = datetime(2025, 3, 9, 23, 59, 30, 250_000, tzinfo=UTC)
TENANT = Scope("tenant", "acme")
AGENT = Scope("agent", "acme", "billing")


@pytest.mark.parametrize(
    ("now", "period", "start", "end"),
    [
        (NOW, "hour", datetime(2025, 3, 9, 23, tzinfo=UTC), datetime(2025, 3, 10, tzinfo=UTC)),
        (NOW, "day", datetime(2025, 3, 9, tzinfo=UTC), datetime(2025, 3, 10, tzinfo=UTC)),
        # A time in another zone is counted in UTC's windows.
        (
            datetime(2025, 3, 10, 1, 30, tzinfo=timezone(timedelta(hours=2))),
            "day",
            datetime(2025, 3, 9, tzinfo=UTC),
            datetime(2025, 3, 10, tzinfo=UTC),
        ),
        (
            datetime(2025, 12, 31, 23, 0, tzinfo=UTC),
            "hour",
            datetime(2025, 12, 31, 23, tzinfo=UTC),
            datetime(2026, 1, 1, tzinfo=UTC),
        ),
        (
            datetime(2024, 2, 29, 0, 0, tzinfo=UTC),
            "day",
            datetime(2024, 2, 29, tzinfo=UTC),
            datetime(2024, 3, 1, tzinfo=UTC),
        ),
    ],
)
def test_windows_are_utc_hours_and_days(
    now: datetime, period: str, start: datetime, end: datetime
) -> None:
    assert window_start(now, period) == start  # type: ignore[arg-type]
    assert window_end(now, period) == end  # type: ignore[arg-type]


def test_a_counter_of_an_earlier_window_counts_nothing() -> None:
    this_hour = window_start(NOW, "hour")
    use = Use(
        NOW,
        spent={
            "hour": Spent(this_hour - timedelta(hours=1), 900, 9.0),
            "day": Spent(window_start(NOW, "day"), 1200, 12.0),
        },
    )
    assert (use.tokens("hour"), use.cost("hour")) == (0, 0.0)
    assert (use.tokens("day"), use.cost("day")) == (1200, 12.0)
    quota = Quota(tokens_per_hour=100, tokens_per_day=1200)
    found = refusal(quota, use, TENANT, starting=True)
    assert found is not None
    assert (found.limit, found.used, found.allowed) == ("tokens_per_day", 1200, 1200)
    assert found.resets_at == datetime(2025, 3, 10, tzinfo=UTC)
    assert found.retry_after == pytest.approx(29.75)


def starts(*seconds_ago: float) -> list[datetime]:
    return sorted(NOW - timedelta(seconds=s) for s in seconds_ago)


@pytest.mark.parametrize(
    ("ago", "allowed", "frees_in"),
    [
        ((50, 40, 10), 3, 10.0),  # the oldest leaves the minute in 10 s
        ((50, 40, 10), 2, 20.0),  # two must leave: the second oldest in 20 s
        ((50, 40, 10), 1, 50.0),  # all three must leave: the newest in 50 s
        ((59.5, 1), 2, 0.5),
        ((70, 65, 30), 2, None),  # those more than a minute old do not count: 1 of 2
        ((), 0, 60.0),  # a limit of 0 never frees: a whole minute is said
    ],
)
def test_runs_per_minute_is_a_sliding_minute(
    ago: tuple[float, ...], allowed: int, frees_in: float | None
) -> None:
    use = Use(NOW, starts=starts(*ago))
    found = refusal(Quota(runs_per_minute=allowed), use, TENANT, starting=True)
    if frees_in is None:
        assert found is None
        return
    assert found is not None
    assert found.limit == "runs_per_minute"
    assert found.retry_after == pytest.approx(frees_in)
    assert found.resets_at == NOW + timedelta(seconds=frees_in)


@pytest.mark.parametrize(
    ("live", "allowed", "refused"),
    [(0, 1, False), (1, 2, False), (2, 2, True), (3, 2, True), (0, 0, True)],
)
def test_concurrent_runs_refuse_at_the_limit(live: int, allowed: int, refused: bool) -> None:
    found = refusal(Quota(concurrent_runs=allowed), Use(NOW, live=live), AGENT, starting=True)
    assert (found is not None) is refused
    if found is not None:
        # No clock says when a run ends: the hint is short, and no reset time is said.
        assert (found.used, found.retry_after, found.resets_at) == (live, CONCURRENCY_RETRY_S, None)
        assert (found.scope, found.tenant, found.agent) == ("agent", "acme", "billing")


def test_between_steps_only_tokens_and_cost_stop_a_run() -> None:
    """A run already started is never stopped by a run limit; spent tokens stop it."""
    use = Use(
        NOW,
        live=9,
        starts=starts(1, 2, 3),
        spent={"hour": Spent(window_start(NOW, "hour"), 10, 0.5)},
    )
    runs_only = Quota(concurrent_runs=1, runs_per_minute=1)
    assert refusal(runs_only, use, TENANT, starting=False) is None
    assert refusal(runs_only, use, TENANT, starting=True) is not None
    found = refusal(Quota(cost_per_hour=0.5), use, TENANT, starting=False)
    assert found is not None
    assert found.limit == "cost_per_hour"


def test_of_several_limits_the_one_that_resets_last_refuses() -> None:
    """Retrying before the latest reset cannot succeed, so that one is said."""
    use = Use(
        NOW,
        live=5,
        starts=starts(5),
        spent={
            "day": Spent(window_start(NOW, "day"), 50, 0.0),
            "hour": Spent(window_start(NOW, "hour"), 50, 0.0),
        },
    )
    quota = Quota(concurrent_runs=5, runs_per_minute=1, tokens_per_hour=50, tokens_per_day=50)
    found = refusal(quota, use, TENANT, starting=True)
    assert found is not None
    assert found.limit == "runs_per_minute"  # 55 s, past the hour's and day's 29.75 s
    assert found.retry_after == pytest.approx(55.0)


def test_under_every_limit_nothing_refuses_and_usage_lists_every_limit() -> None:
    use = Use(
        NOW, live=1, starts=starts(3), spent={"day": Spent(window_start(NOW, "day"), 10, 0.25)}
    )
    quota = Quota(concurrent_runs=2, runs_per_minute=2, tokens_per_day=11, cost_per_day=0.5)
    assert refusal(quota, use, TENANT, starting=True) is None
    shown = {u.limit: (u.allowed, u.used) for u in usage(quota, use)}
    assert shown == {
        "concurrent_runs": (2, 1),
        "runs_per_minute": (2, 1),
        "tokens_per_hour": (None, 0),
        "tokens_per_day": (11, 10),
        "cost_per_hour": (None, 0),
        "cost_per_day": (0.5, 0.25),
    }


def test_the_refusal_is_a_quota_exceeded_error_with_its_details() -> None:
    found = refusal(
        Quota(tokens_per_hour=10),
        Use(NOW, spent={"hour": Spent(window_start(NOW, "hour"), 12, 0)}),
        AGENT,
        starting=True,
    )
    assert found is not None
    error = exceeded(found)
    assert isinstance(error, QuotaExceededError)
    assert (error.code, error.retryable, error.retry_after) == (
        ErrorCode.QUOTA_EXCEEDED,
        True,
        29.75,
    )
    assert error.details == found.model_dump(mode="json")
    assert error.details["limit"] == "tokens_per_hour"
    for part in (
        "tokens_per_hour",
        "agent 'billing' in tenant 'acme'",
        "12 of 10",
        "2025-03-10T00:00:00",
    ):
        assert part in error.message
    assert ErrorCode.QUOTA_EXCEEDED.spec.status == 429
