"""`current_time` and `convert_time`: the clock in any IANA time zone.

At their edge they read what people and small models write where the meaning is plain:
a place for a zone ("London" → `Europe/London`, "new york" → `America/New_York`, from the
zone database's city names and a small table in `tether_common.places`) and a 12-hour
time ("9am", "3:30 PM"). Each such reading is noted as a repair on the result.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from datetime import time as wall_clock
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tether_common.messages.tools import ToolDescriptor
from tether_common.places import place_zone
from tether_tools_runner.repairs import note
from tether_tools_runner.tool import Tool, ToolFailure

_TWELVE_HOUR = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s*m\.?\s*$", re.IGNORECASE)

CURRENT_TIME = ToolDescriptor(
    name="current_time",
    description=(
        "Returns the current date and time in one IANA time zone. Use it whenever the user "
        "asks what time or date it is anywhere; never guess the time. Argument `timezone` is "
        "an IANA name such as 'Asia/Tokyo', 'Europe/Paris' or 'UTC' (not an abbreviation "
        "like 'PST'); an unknown name fails with `unknown_timezone`. "
        'Example: {"timezone": "Asia/Tokyo"}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "IANA time zone name, e.g. 'Asia/Tokyo'. Default 'UTC'.",
                "minLength": 1,
                "maxLength": 64,
            }
        },
        "required": [],
        "additionalProperties": False,
    },
    scope="read",
    reach="self",
    effect="read",
    idempotent=True,
    aliases=["time", "get_time", "get_current_time", "now"],
    output_trust="trusted",
)

CONVERT_TIME = ToolDescriptor(
    name="convert_time",
    description=(
        "Converts a wall-clock time from one IANA time zone to another. Use it for "
        "'what is 9:00 in Paris when it is ...' questions. `time` is ISO 8601 "
        "('2026-03-01T09:00' or '09:00' for today); `from_timezone` and `to_timezone` are "
        "IANA names. Daylight-saving rules of the date are applied. "
        'Example: {"time": "09:00", "from_timezone": "Europe/London", '
        '"to_timezone": "America/New_York"}.'
    ),
    parameters={
        "type": "object",
        "properties": {
            "time": {"type": "string", "minLength": 1, "maxLength": 40},
            "from_timezone": {"type": "string", "minLength": 1, "maxLength": 64},
            "to_timezone": {"type": "string", "minLength": 1, "maxLength": 64},
        },
        "required": ["time", "from_timezone", "to_timezone"],
        "additionalProperties": False,
    },
    scope="read",
    reach="self",
    effect="read",
    idempotent=True,
    output_trust="trusted",
)


def zone_name(name: str) -> str:
    """The IANA name `name` means: itself when it is one, else the zone of the place it
    names (noted as a repair); an unknown name fails with a hint."""
    if _is_zone(name):
        return name
    place = place_zone(name)
    if place is not None:
        note(f"timezone {name!r} read as {place!r}")
        return place
    close = sorted(z for z in available_timezones() if name.lower() in z.lower())[:5]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ToolFailure("unknown_timezone", f"'{name}' is not an IANA time zone name.{hint}")


def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def describe(moment: datetime, tz_name: str) -> str:
    offset = moment.strftime("%z")
    return (
        f"{moment.strftime('%A %d %B %Y, %H:%M:%S')} in {tz_name} "
        f"(UTC{offset[:3]}:{offset[3:]}, {moment.tzname()}); ISO {moment.isoformat()}"
    )


async def current_time(args: dict[str, Any]) -> str:
    tz_name = zone_name(str(args.get("timezone") or "UTC"))
    return describe(datetime.now(ZoneInfo(tz_name)), tz_name)


def _parse_wall_time(text: str, tz: ZoneInfo) -> datetime:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        clock = _wall_clock(text)
        today = datetime.now(tz).date()
        parsed = datetime.combine(today, clock)
    return parsed.replace(tzinfo=tz) if parsed.tzinfo is None else parsed


def _wall_clock(text: str) -> wall_clock:
    """`HH:MM[:SS]`, or a 12-hour time ("9am", "3:30 PM") read as 24-hour and noted."""
    try:
        return wall_clock.fromisoformat(text.strip())
    except ValueError:
        pass
    twelve = _TWELVE_HOUR.match(text)
    hour = int(twelve.group(1)) if twelve else 0
    if twelve is None or not 1 <= hour <= 12 or int(twelve.group(2) or 0) > 59:
        raise ToolFailure(
            "invalid_time", f"'{text}' is not ISO 8601 ('2026-03-01T09:00') or 'HH:MM'."
        )
    hour = hour % 12 + (12 if twelve.group(3).lower() == "p" else 0)
    clock = wall_clock(hour, int(twelve.group(2) or 0))
    note(f"time {text!r} read as {clock.strftime('%H:%M')!r}")
    return clock


async def convert_time(args: dict[str, Any]) -> str:
    source_name, target_name = zone_name(args["from_timezone"]), zone_name(args["to_timezone"])
    moment = _parse_wall_time(args["time"], ZoneInfo(source_name))
    converted = moment.astimezone(ZoneInfo(target_name))
    return f"{args['time']} in {source_name} is " + describe(converted, target_name)


def clock_tools() -> list[Tool]:
    return [Tool(CURRENT_TIME, current_time), Tool(CONVERT_TIME, convert_time)]


__all__ = ["UTC", "clock_tools"]
