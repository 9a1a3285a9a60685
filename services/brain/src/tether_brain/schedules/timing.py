"""When a schedule's ticks fall: a cron expression read in an IANA time zone, or a fixed
interval from an anchor. Pure functions of instants (aware datetimes), so every replica
computes the same ticks and the rules can be tested without a clock.

Cron is wall-clock time in the schedule's zone (croniter walks the wall times, naive;
`zoneinfo` turns each into an instant with `fold=0`):
- a wall time the clocks skip (spring forward, e.g. 02:30 in Europe/Berlin on the last
  Sunday of March) fires once, as far after the gap as it was into it (03:30 CEST): the
  offset in force before the change, PEP 495's rule for `fold=0`;
- a wall time the clocks repeat (fall back) fires once, at its first occurrence;
- ticks are strictly increasing instants: two wall times that land on one instant
  (02:00 skipped becomes 03:00, which is also a wall time) fire once.

An interval schedule ticks at `anchor + k * interval` (k ≥ 1), whatever the zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from tether_common.errors import ErrorCode, MessageError

# Wall times examined for one next tick before giving up: a per-second cron scanning the
# three hours around a clock change needs ~14,400; a year of a daily one 366.
SCAN_LIMIT = 20_000
# Around a clock change a wall time before `after`'s may map after it (a skipped one is
# moved forward by the gap); no zone's change moves clocks by more than this in a day.
GAP_LOOKBACK = timedelta(hours=3)
# The furthest back `due` looks for the latest due tick: older ticks are missed whatever.
DUE_LOOKBACK = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Timing:
    """One schedule's clock: `cron` in `zone`, or every `interval_s` after `anchor`."""

    cron: str | None
    zone: ZoneInfo
    interval_s: int | None
    anchor: datetime

    def next_after(self, after: datetime) -> datetime:
        """The first tick strictly after `after` (UTC)."""
        if self.interval_s is not None:
            return _interval_next(self.anchor, self.interval_s, after)
        assert self.cron is not None
        return _cron_next(self.cron, self.zone, after)


@dataclass(frozen=True, slots=True)
class Due:
    """The ticks due at `now`, from the schedule's `next_fire_at` on: how many (`count`,
    at least 1; counting stops at `DUE_LOOKBACK`'s worth), the latest (`latest`), and the
    first tick after `now` (`following`), which becomes `next_fire_at`."""

    count: int
    latest: datetime
    following: datetime

    def on_time(self, now: datetime, grace_s: float) -> bool:
        """The latest due tick is at most `grace_s` late: it is this tick, not a missed one."""
        return (now - self.latest).total_seconds() <= grace_s


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone `name` (422 `invalid_request` for an unknown one)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise MessageError(
            f"unknown time zone '{name}' (an IANA name such as 'Europe/Berlin' or 'UTC')",
            code=ErrorCode.INVALID_REQUEST,
        ) from None


def timing_of(
    *, cron: str | None, timezone: str, interval_s: int | None, anchor: datetime
) -> Timing:
    """A schedule's clock from its fields; 422 `invalid_request` for a cron expression that
    does not parse or never fires, an unknown zone, or neither/both of cron and interval."""
    if (cron is None) == (interval_s is None):
        raise MessageError(
            "a schedule has either a cron expression or an interval, not both or neither",
            code=ErrorCode.INVALID_REQUEST,
        )
    zone = zone_of(timezone)
    if interval_s is not None:
        if interval_s < 1:
            raise MessageError("interval_s must be at least 1", code=ErrorCode.INVALID_REQUEST)
        return Timing(None, zone, interval_s, anchor.astimezone(UTC))
    assert cron is not None
    if not croniter.is_valid(cron):
        raise MessageError(
            f"'{cron}' is not a cron expression (minute hour day month weekday [second])",
            code=ErrorCode.INVALID_REQUEST,
        )
    timing = Timing(cron, zone, None, anchor.astimezone(UTC))
    timing.next_after(anchor)  # one that never fires (30 February) is refused now
    return timing


def due(timing: Timing, next_fire_at: datetime, now: datetime) -> Due | None:
    """The ticks due at `now` (None: `next_fire_at` is still ahead)."""
    if next_fire_at > now:
        return None
    latest, count = next_fire_at, 1
    if now - next_fire_at > DUE_LOOKBACK:
        # Everything before the lookback is missed whatever it holds; only whether a later
        # tick is due matters (it would be the latest).
        later = timing.next_after(now - DUE_LOOKBACK)
        if later <= now:
            latest, count = later, 2
    while (step := timing.next_after(latest)) <= now:
        latest, count = step, count + 1
    return Due(count, latest, timing.next_after(now))


def _interval_next(anchor: datetime, interval_s: int, after: datetime) -> datetime:
    step = timedelta(seconds=interval_s)
    if after < anchor:
        return anchor + step
    passed = (after - anchor) // step  # whole intervals since the anchor
    return anchor + (passed + 1) * step


def _cron_next(cron: str, zone: ZoneInfo, after: datetime) -> datetime:
    after = after.astimezone(UTC)
    start = after
    if (after - GAP_LOOKBACK).astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
        start = after - GAP_LOOKBACK  # a clock change near: see GAP_LOOKBACK
    walls = croniter(cron, start.astimezone(zone).replace(tzinfo=None))
    try:
        for _ in range(SCAN_LIMIT):
            wall: datetime = walls.get_next(datetime)
            instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            if instant > after:
                return instant
    except (CroniterBadDateError, CroniterBadCronError, OverflowError):
        pass
    raise MessageError(
        f"the cron expression '{cron}' has no time after {after.isoformat()}",
        code=ErrorCode.INVALID_REQUEST,
    )
