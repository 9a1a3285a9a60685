"""`current_time` and `convert_time`: the clock in any IANA time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from datetime import time as wall_clock
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tether_common.messages.tools import ToolDescriptor
from tether_tools_runner.tool import Tool, ToolFailure

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


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        close = sorted(z for z in available_timezones() if name.lower() in z.lower())[:5]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ToolFailure(
            "unknown_timezone", f"'{name}' is not an IANA time zone name.{hint}"
        ) from None


def describe(moment: datetime, tz_name: str) -> str:
    offset = moment.strftime("%z")
    return (
        f"{moment.strftime('%A %d %B %Y, %H:%M:%S')} in {tz_name} "
        f"(UTC{offset[:3]}:{offset[3:]}, {moment.tzname()}); ISO {moment.isoformat()}"
    )


async def current_time(args: dict[str, Any]) -> str:
    tz_name = str(args.get("timezone") or "UTC")
    return describe(datetime.now(zone(tz_name)), tz_name)


def _parse_wall_time(text: str, tz: ZoneInfo) -> datetime:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            clock = wall_clock.fromisoformat(text)
        except ValueError:
            raise ToolFailure(
                "invalid_time", f"'{text}' is not ISO 8601 ('2026-03-01T09:00') or 'HH:MM'."
            ) from None
        today = datetime.now(tz).date()
        parsed = datetime.combine(today, clock)
    return parsed.replace(tzinfo=tz) if parsed.tzinfo is None else parsed


async def convert_time(args: dict[str, Any]) -> str:
    source, target = zone(args["from_timezone"]), zone(args["to_timezone"])
    moment = _parse_wall_time(args["time"], source).astimezone(target)
    return f"{args['time']} in {args['from_timezone']} is " + describe(moment, args["to_timezone"])


def clock_tools() -> list[Tool]:
    return [Tool(CURRENT_TIME, current_time), Tool(CONVERT_TIME, convert_time)]


__all__ = ["UTC", "clock_tools"]
