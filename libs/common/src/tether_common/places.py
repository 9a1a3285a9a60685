"""Place names and the IANA time zones they mean: the city part of every zone name in the
zone database (`Europe/London` → "london"), plus a short table of places people name that
are not zone cities (countries, US cities, abbreviations).

Used where a person or a small model writes a place for a zone: the rules planner finds
those in a question, and the clock tools read `"London"` as `Europe/London`. A name maps to
a zone only when that is unambiguous: the table is explicit, and zone cities are unique
by construction of the zone database.
"""

from __future__ import annotations

import re
from functools import cache
from types import MappingProxyType
from typing import Final
from zoneinfo import available_timezones

__all__ = ["EXTRA_PLACES", "place_zone", "places", "zones_named"]

# Places people name that are not the city part of an IANA zone name.
EXTRA_PLACES: Final = MappingProxyType(
    {
        "utc": "UTC",
        "gmt": "Etc/GMT",
        "san francisco": "America/Los_Angeles",
        "sf": "America/Los_Angeles",
        "seattle": "America/Los_Angeles",
        "boston": "America/New_York",
        "washington": "America/New_York",
        "washington dc": "America/New_York",
        "nyc": "America/New_York",
        "miami": "America/New_York",
        "atlanta": "America/New_York",
        "dallas": "America/Chicago",
        "houston": "America/Chicago",
        "beijing": "Asia/Shanghai",
        "delhi": "Asia/Kolkata",
        "new delhi": "Asia/Kolkata",
        "mumbai": "Asia/Kolkata",
        "bangalore": "Asia/Kolkata",
        "osaka": "Asia/Tokyo",
        "kyoto": "Asia/Tokyo",
        "munich": "Europe/Berlin",
        "frankfurt": "Europe/Berlin",
        "hamburg": "Europe/Berlin",
        "barcelona": "Europe/Madrid",
        "milan": "Europe/Rome",
        "geneva": "Europe/Zurich",
        "edinburgh": "Europe/London",
        "manchester": "Europe/London",
        "melbourne": "Australia/Melbourne",
        "japan": "Asia/Tokyo",
        "china": "Asia/Shanghai",
        "india": "Asia/Kolkata",
        "germany": "Europe/Berlin",
        "france": "Europe/Paris",
        "spain": "Europe/Madrid",
        "italy": "Europe/Rome",
        "uk": "Europe/London",
        "england": "Europe/London",
        "australia": "Australia/Sydney",
        "brazil": "America/Sao_Paulo",
        "sao paulo": "America/Sao_Paulo",
        "korea": "Asia/Seoul",
        "south korea": "Asia/Seoul",
        "hong kong": "Asia/Hong_Kong",
        "california": "America/Los_Angeles",
    }
)
_SPACES: Final = re.compile(r"[\s_]+")


@cache
def places() -> MappingProxyType[str, str]:
    """Lower-case place name → IANA zone, from the zone database plus `EXTRA_PLACES`."""
    table: dict[str, str] = {}
    for zone in available_timezones():
        if "/" in zone and not zone.startswith(("Etc/", "SystemV/", "US/")):
            table.setdefault(zone.rsplit("/", 1)[1].replace("_", " ").lower(), zone)
        table.setdefault(zone.lower(), zone)
    table.update(EXTRA_PLACES)
    return MappingProxyType(table)


def place_zone(name: str) -> str | None:
    """The zone a whole name means (`"New York"`, `"new_york"`, `"europe/london"`), or None."""
    key = _SPACES.sub(" ", name.strip().strip(".,").lower())
    return places().get(key) or places().get(key.replace(" ", "_"))


@cache
def _longest_first() -> tuple[tuple[str, str], ...]:
    return tuple(sorted(places().items(), key=lambda item: (-len(item[0]), item[0])))


def zones_named(text: str) -> list[tuple[int, str]]:
    """Each place named in `text` (whole words; where names overlap, the longest: "new
    york", not "york"), as (where it starts, its zone), in the order written."""
    lowered = text.lower()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, str]] = []
    for place, zone in _longest_first():
        if len(place) < 2 or place not in lowered:
            continue
        for match in re.finditer(rf"(?<![\w/]){re.escape(place)}(?![\w/])", lowered):
            start, end = match.span()
            if not any(start < until and since < end for since, until in taken):
                taken.append((start, end))
                found.append((start, zone))
    return sorted(found)
