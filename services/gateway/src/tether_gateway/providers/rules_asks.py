"""What the rules planner reads in a request: a sum to work out, the time somewhere, a
clock time to convert between places, a file of the workspace to read, a folder to list
or words to search for, or a follow-up ("and in Paris?", "and times 3?") that takes its
frame from an earlier request of the conversation.

Reading only: every value found is handed to a tool that checks it (`calculate` refuses
anything but arithmetic, the clock tools any zone or time they cannot read, the file
tools any path outside the workspace), so a wrong guess here is a failed tool call the
answer names, never a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tether_common.places import place_zone, zones_named

__all__ = [
    "Ask",
    "Convert",
    "ListFiles",
    "ReadFile",
    "SearchFiles",
    "Sum",
    "TimeIn",
    "Unclear",
    "read",
    "read_in_conversation",
]


@dataclass(frozen=True, slots=True)
class Sum:
    expression: str


@dataclass(frozen=True, slots=True)
class TimeIn:
    zones: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Convert:
    time: str
    from_zone: str
    to_zones: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unclear:
    """A request of a kind the planner knows, missing what it needs."""

    why: str


@dataclass(frozen=True, slots=True)
class ReadFile:
    path: str


@dataclass(frozen=True, slots=True)
class ListFiles:
    path: str


@dataclass(frozen=True, slots=True)
class SearchFiles:
    pattern: str


Ask = Sum | TimeIn | Convert | ReadFile | ListFiles | SearchFiles | Unclear

# A file of the workspace as people name one: a name with an extension, maybe in folders.
FILE_NAME = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/])"
)
READ_WORDS = re.compile(
    r"\b(read|show|open|cat|print|display|contents? of|what(?:'s| is) in|look at)\b",
    re.IGNORECASE,
)
LIST_WORDS = re.compile(
    r"\b(list|ls)\b.*\bfiles?\b|\bwhat files\b|\bwhich files are\b|^\s*ls\b", re.IGNORECASE
)
FOLDER = re.compile(
    r"\b(?:in|under)\s+(?:the\s+)?(?:folder\s+)?([\w.-]+(?:/[\w.-]+)*)/?", re.IGNORECASE
)
SEARCH = re.compile(
    r"\b(?:search(?: the files)? for|grep(?: for)?|find|mention(?:s|ing)?|contain(?:s|ing)?)"
    r"\s+(?:the words?\s+)?[\"'“]?([^\"'”?]+?)[\"'”]?\s*(?:\bin\b.*)?\??\s*$",
    re.IGNORECASE,
)

TIME_WORDS = re.compile(
    r"\b(time|clock|o'clock|hour|date|day is it|today|timezone|time zone)\b", re.IGNORECASE
)
CLOCK = re.compile(
    r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*[ap]\.?m\b\.?)?|\b\d{1,2}\s*[ap]\.?m\b\.?", re.IGNORECASE
)
ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
FOLLOW_UP = re.compile(
    r"^\s*(and|also|what about|how about|and what about|same for|then)\b", re.IGNORECASE
)
BARE_PLACE = re.compile(r"^\s*(in|at|for)\b|[?.!]+\s*$", re.IGNORECASE)

# Words people write for arithmetic, as `calculate` reads it (order matters: longest first).
WORD_OPERATORS = (
    (re.compile(r"(\d)\s*%\s*of\b", re.IGNORECASE), r"\1/100*"),
    (re.compile(r"\bsquare root of\b", re.IGNORECASE), "sqrt "),
    (re.compile(r"\bto the power of\b", re.IGNORECASE), "**"),
    (re.compile(r"\b(multiplied by|times)\b", re.IGNORECASE), "*"),
    (re.compile(r"\b(divided by|over)\b", re.IGNORECASE), "/"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\bsquared\b", re.IGNORECASE), "**2"),
    (re.compile(r"\bcubed\b", re.IGNORECASE), "**3"),
    (re.compile(r"(?<=\d)\s*[x×]\s*(?=[\d(])"), "*"),
    (re.compile(r"÷"), "/"),
    (re.compile(r"[−–]"), "-"),
    (re.compile(r"\^"), "**"),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), ""),  # 1,000,000
)
FUNCTIONS = "sqrt|cbrt|exp|log10|log2|log|sin|cos|tan|abs|round|floor|ceil|factorial|min|max|hypot"
TOKEN = (
    r"(?:\d+(?:\.\d+)?|\.\d+|\bpi\b|\btau\b|\*\*|[<>]=?|[=!]=|[-+*/%(),]"
    rf"|\b(?:{FUNCTIONS})\s*(?=\()|\b(?:{FUNCTIONS})\s+(?=\d))"
)
EXPRESSION = re.compile(rf"{TOKEN}(?:\s*{TOKEN})*", re.IGNORECASE)
OPERATOR = re.compile(rf"[-+*/%<>]|[=!]=|\b(?:{FUNCTIONS})\b", re.IGNORECASE)
LEADING_OPERATOR = re.compile(r"^\s*(\*\*|[-+*/%])\s*(.+)$")


def arithmetic(text: str) -> str | None:
    """The longest arithmetic expression written in `text`, in `calculate`'s syntax, or
    None (a lone number, a date or a clock time is none)."""
    plain = CLOCK.sub(" ", ISO_DATE.sub(" ", text))
    for pattern, written in WORD_OPERATORS:
        plain = pattern.sub(written, plain)
    best = ""
    for match in EXPRESSION.finditer(plain):
        candidate = _trimmed(match.group())
        if len(candidate) > len(best) and _is_sum(candidate):
            best = candidate
    return _call_form(best) if best else None


def _trimmed(expression: str) -> str:
    """Without the commas and operators a sentence leaves at either end."""
    expression = expression.strip().strip(",").strip()
    while expression and expression[-1] in "+-*/%(,<>=!":
        expression = expression[:-1].rstrip()
    while expression and expression[0] in "*/%),":
        expression = expression[1:].lstrip()
    return expression


def _is_sum(expression: str) -> bool:
    has_number = re.search(r"\d|\bpi\b|\btau\b", expression, re.IGNORECASE) is not None
    return has_number and OPERATOR.search(expression.lstrip("+- ")) is not None


def _call_form(expression: str) -> str:
    """`sqrt 16` as `sqrt(16)`: `calculate` takes Python's call syntax."""
    return re.sub(rf"\b({FUNCTIONS})\s+(\d+(?:\.\d+)?)", r"\1(\2)", expression, flags=re.IGNORECASE)


def read(text: str) -> Ask | None:
    """What `text` asks of the planner on its own, or None."""
    if (asked := _workspace_ask(text)) is not None:
        return asked
    zones = zones_named(text)
    clock = CLOCK.search(text)
    wants_clock = TIME_WORDS.search(text) or "convert" in text.lower() or len(zones) >= 2
    if clock is not None and wants_clock and zones:
        if len(zones) >= 2:
            return _conversion(clock, zones)
        return Unclear(
            f"to convert {clock.group().strip()} I need the place it is in and the place to "
            "convert it to, e.g. 'what is 9:00 in London in Tokyo?'"
        )
    if (expression := arithmetic(text)) is not None:
        return Sum(expression)
    if TIME_WORDS.search(text):
        return TimeIn(_distinct(zones) or ("UTC",))
    return None


def _workspace_ask(text: str) -> Ask | None:
    """A file to read ("show me notes.txt"), a folder to list ("list the files in src"),
    or words to search for ("which files mention whale?"), or None."""
    if LIST_WORDS.search(text):
        folder = FOLDER.search(text)
        return ListFiles(folder.group(1) if folder is not None else ".")
    if (searched := SEARCH.search(text)) is not None and "file" in text.lower():
        return SearchFiles(searched.group(1).strip())
    name = FILE_NAME.search(text)
    if name is not None and READ_WORDS.search(text):
        return ReadFile(name.group(1))
    return None


def _distinct(zones: list[tuple[int, str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(zone for _, zone in zones))


def _conversion(clock: re.Match[str], zones: list[tuple[int, str]]) -> Convert:
    """The place nearest the clock time is where it is; the others are asked for."""
    at = clock.start()
    nearest = min(zones, key=lambda found: abs(found[0] - at))[1]
    others = tuple(zone for zone in _distinct(zones) if zone != nearest)
    return Convert(clock.group().strip(), nearest, others or (nearest,))


def read_in_conversation(text: str, earlier: list[str]) -> Ask | None:
    """What `text` asks, read after the conversation's earlier requests (oldest first),
    each read the same way: a follow-up naming places ("and in Paris?") asks what the
    latest request asked if that was a time, of those places; one that starts with an
    operator ("and times 3?") goes on from it if that was a sum."""
    asked: list[Ask] = []
    for before in earlier:
        if (found := _in_context(before, asked)) is not None:
            asked.append(found)
    return _in_context(text, asked)


def _in_context(text: str, asked: list[Ask]) -> Ask | None:
    own = read(text)
    if (own is not None and not isinstance(own, Unclear)) or not _follows_up(text):
        return own
    latest = next((a for a in reversed(asked) if not isinstance(a, Unclear)), None)
    if (followed := _follow_up(text, latest)) is not None:
        return followed
    if zones_named(text):  # places, but nothing earlier to ask of them
        places = BARE_PLACE.sub("", FOLLOW_UP.sub("", text)).strip()
        return Unclear(
            f"{text.strip()!r} follows no question about the time; ask e.g. 'what time is it "
            f"in {places}?'"
        )
    return own


def _follows_up(text: str) -> bool:
    """Starts as a follow-up does ("and", "what about"), or is a place alone ("Paris?")."""
    bare = BARE_PLACE.sub("", text).strip()
    return FOLLOW_UP.search(text) is not None or (bool(bare) and place_zone(bare) is not None)


def _follow_up(text: str, latest: Ask | None) -> Ask | None:
    zones = _distinct(zones_named(text))
    match latest:
        case TimeIn() if zones:
            return replace(latest, zones=zones)
        case Convert() if zones:
            return replace(latest, to_zones=zones)
        case Sum(expression) if not zones and (more := _going_on(FOLLOW_UP.sub("", text))):
            return Sum(f"({expression}){more}")
        case _:
            return None


def _going_on(text: str) -> str | None:
    """` * 3` from "times 3?": an operator and an operand, in `calculate`'s syntax."""
    plain = text
    for pattern, written in WORD_OPERATORS:
        plain = pattern.sub(written, plain)
    match = LEADING_OPERATOR.match(plain.strip())
    if match is None:
        return None
    found = arithmetic(f"0 {match.group(1)} {match.group(2)}")
    return found[1:] if found is not None and found.startswith("0") else None
