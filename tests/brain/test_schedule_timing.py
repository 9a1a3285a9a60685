"""When a schedule's ticks fall (cron in a zone across clock changes, intervals), and what
one claim does with its due ticks (catch-up and overlap rules): units, no clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tether_brain.schedules.plan import plan
from tether_brain.schedules.timing import Due, Timing, due, timing_of
from tether_common.errors import MessageError

START = datetime(2024, 1, 1, tzinfo=UTC)


def cron(expr: str, zone: str = "UTC") -> Timing:
    return timing_of(cron=expr, timezone=zone, interval_s=None, anchor=START)


def ticks(timing: Timing, after: datetime, until: datetime) -> list[datetime]:
    found, at = [], after
    while (at := timing.next_after(at)) <= until:
        found.append(at)
    return found


def local(zone: str, *parts: int) -> datetime:
    """A wall time in `zone` (first occurrence) as an instant."""
    year, month, day, hour, minute = parts
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone)).astimezone(UTC)


@pytest.mark.parametrize(
    ("expr", "zone", "day", "expected"),
    [
        # Spring forward: 02:30 does not exist; it fires once, an hour on (03:30 CEST).
        ("30 2 * * *", "Europe/Berlin", (2024, 3, 31), [(2024, 3, 31, 1, 30)]),
        # Fall back: 02:30 happens twice; it fires once, the first time (CEST).
        ("30 2 * * *", "Europe/Berlin", (2024, 10, 27), [(2024, 10, 27, 0, 30)]),
        # US spring forward at 02:00 local.
        ("30 2 * * *", "America/New_York", (2024, 3, 10), [(2024, 3, 10, 7, 30)]),
        # An ordinary day is 02:30 local.
        ("30 2 * * *", "Europe/Berlin", (2024, 6, 1), [(2024, 6, 1, 0, 30)]),
        # Lord Howe moves its clocks by half an hour.
        ("15 2 * * *", "Australia/Lord_Howe", (2024, 10, 6), [(2024, 10, 5, 15, 45)]),
        # A zone without clock changes.
        ("0 9 * * 1-5", "Asia/Tokyo", (2024, 3, 11), [(2024, 3, 11, 0, 0)]),
    ],
)
def test_a_daily_job_fires_once_on_its_day_whatever_the_clocks_do(
    expr: str, zone: str, day: tuple[int, int, int], expected: list[tuple[int, ...]]
) -> None:
    # The local calendar day, as instants (a day around a clock change is 23 or 25 hours).
    begin = local(zone, *day, 0, 0)
    end = local(zone, *(date(*day) + timedelta(days=1)).timetuple()[:3], 0, 0)
    assert ticks(cron(expr, zone), begin - timedelta(microseconds=1), end) == [
        local("UTC", *t) for t in expected
    ]


@pytest.mark.parametrize(
    ("day", "hours"),
    [((2024, 3, 31), 23), ((2024, 10, 27), 24), ((2024, 6, 1), 24)],
)
def test_an_hourly_job_fires_once_per_instant_never_twice(
    day: tuple[int, int, int], hours: int
) -> None:
    """Spring: 02:00 is skipped (it lands on 03:00, which fires once). Fall: each wall hour
    fires once, 02:00 at its first occurrence, so the day has 24 ticks, not 25."""
    zone = "Europe/Berlin"
    begin = local(zone, *day, 0, 0)
    found = ticks(
        cron("0 * * * *", zone),
        begin - timedelta(microseconds=1),
        begin + timedelta(hours=hours + 1) - timedelta(seconds=1),
    )
    found = [t for t in found if t.astimezone(ZoneInfo(zone)).date() == date(*day)]
    assert len(found) == len(set(found)) == hours
    assert found == sorted(found)


def test_seconds_field_and_interval_ticks() -> None:
    assert ticks(cron("* * * * * 10,40"), START, START + timedelta(minutes=1)) == [
        START + timedelta(seconds=10),
        START + timedelta(seconds=40),
    ]
    every = timing_of(cron=None, timezone="UTC", interval_s=7, anchor=START)
    assert every.next_after(START) == START + timedelta(seconds=7)
    assert every.next_after(START + timedelta(seconds=7)) == START + timedelta(seconds=14)
    assert every.next_after(START + timedelta(seconds=13.9)) == START + timedelta(seconds=14)
    assert every.next_after(START - timedelta(days=1)) == START + timedelta(seconds=7)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "*/0 * * * *"}, "not a cron expression"),
        ({"cron": "not cron"}, "not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "no time after"),  # 30 February never comes
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "unknown time zone"),
        ({"cron": "0 9 * * *", "interval_s": 60}, "not both"),
        ({}, "not both or neither"),
        ({"interval_s": 0}, "at least 1"),
        ({"interval_s": -5}, "at least 1"),
    ],
)
def test_a_bad_clock_is_refused_with_its_reason(fields: dict[str, object], needle: str) -> None:
    args: dict[str, object] = {"cron": None, "timezone": "UTC", "interval_s": None} | fields
    with pytest.raises(MessageError) as caught:
        timing_of(anchor=START, **args)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_request"
    assert needle in str(caught.value)


def test_due_counts_the_ticks_and_names_the_next() -> None:
    every = timing_of(cron=None, timezone="UTC", interval_s=10, anchor=START)
    first = START + timedelta(seconds=10)
    assert due(every, first, first - timedelta(seconds=1)) is None
    found = due(every, first, START + timedelta(seconds=45))
    assert found == Due(4, START + timedelta(seconds=40), START + timedelta(seconds=50))
    # Down for two days: the latest tick is found without walking every one.
    later = due(every, first, START + timedelta(days=2, seconds=5))
    assert later is not None
    assert later.count >= 2
    assert later.latest == START + timedelta(days=2)
    assert later.following == START + timedelta(days=2, seconds=10)


NOW = START + timedelta(hours=1)
TICK = timedelta(seconds=10)


def due_at(count: int, late_s: float) -> Due:
    latest = NOW - timedelta(seconds=late_s)
    return Due(count, latest, latest + TICK)


@pytest.mark.parametrize(
    ("count", "late_s", "catch_up", "fires", "covers", "skipped"),
    [
        (1, 0.5, "skip", True, 1, 0),  # on time
        (1, 0.5, "run_once", True, 1, 0),
        (1, 30, "skip", False, 0, 1),  # missed (grace 5 s)
        (1, 30, "run_once", True, 1, 0),
        (6, 30, "skip", False, 0, 6),  # down for a minute: none of the missed
        (6, 30, "run_once", True, 6, 0),  # exactly one run for all of them
        (6, 1, "skip", True, 1, 5),  # back just before a tick: that one is on time
        (6, 1, "run_once", True, 6, 0),
    ],
)
def test_catch_up_after_downtime(
    count: int, late_s: float, catch_up: str, fires: bool, covers: int, skipped: int
) -> None:
    decided = plan(
        due=due_at(count, late_s),
        pending=None,
        busy=False,
        overlap="skip",
        catch_up=catch_up,
        grace_s=5,
        now=NOW,
    )
    assert (decided.fire is not None, decided.covers, decided.skipped) == (fires, covers, skipped)
    assert decided.next_fire_at == NOW - timedelta(seconds=late_s) + TICK


@pytest.mark.parametrize(
    ("overlap", "busy", "pending", "fires", "queued", "skipped"),
    [
        ("allow", True, False, "tick", False, 0),
        ("skip", True, False, None, False, 1),
        ("queue", True, False, None, True, 0),
        ("queue", True, True, None, True, 1),  # a queue of one: the new tick is dropped
        ("queue", False, True, "pending", True, 0),  # the queued tick runs; the new one waits
        ("skip", False, False, "tick", False, 0),
        ("queue", False, False, "tick", False, 0),
    ],
)
def test_overlap_while_the_last_run_goes_on(
    overlap: str, busy: bool, pending: bool, fires: str | None, queued: bool, skipped: int
) -> None:
    waiting = NOW - timedelta(seconds=20)
    decided = plan(
        due=due_at(1, 0.1),
        pending=waiting if pending else None,
        busy=busy,
        overlap=overlap,
        catch_up="skip",
        grace_s=5,
        now=NOW,
    )
    expected = {"tick": NOW - timedelta(seconds=0.1), "pending": waiting, None: None}[fires]
    assert decided.fire == expected
    assert (decided.pending is not None) == queued
    assert decided.skipped == skipped


def test_a_queued_tick_starts_once_the_last_run_ended_even_with_nothing_due() -> None:
    waiting = NOW - timedelta(seconds=20)
    decided = plan(
        due=None, pending=waiting, busy=False, overlap="queue", catch_up="skip", grace_s=5, now=NOW
    )
    assert (decided.fire, decided.pending, decided.next_fire_at) == (waiting, None, None)
    held = plan(
        due=None, pending=waiting, busy=True, overlap="queue", catch_up="skip", grace_s=5, now=NOW
    )
    assert (held.fire, held.pending) == (None, waiting)
