"""The agent templater: `{name}` variables in an agent's `instructions` and `prefetch`
arguments, filled once when a run starts.

Deliberately not `str.format`: a format string from a user reaches attributes and items
of its arguments (`{caller.__class__}`, `{agent[0]}`) and runs format specs. Here a
template is scanned once, left to right: `{name}` of a known variable is replaced, `{{`
and `}}` are literal braces, a brace group that looks like a field with an attribute,
index, conversion or format spec is refused, and any other brace text (`{"a": 1}`) stays
as written. Unknown variables are refused when the agent is applied, so a run never
meets one. Substitution is one pass: a value is never read as a template again.

Values are neutralised before they go in: only letters, digits, spaces (one at a time),
`.`, `_`, `-`, `@`, `+` and a colon between two digits (`04:05`) are kept, at most
`VALUE_CHARS` of them. A caller's name then
cannot start a line, write a role marker (`System:`, `<|im_start|>`, `[INST]`) or a
brace, whatever its identity provider allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "VALUE_CHARS",
    "VARIABLES",
    "TemplateError",
    "check",
    "check_arguments",
    "neutral",
    "render",
    "render_arguments",
    "run_values",
]

# The variables a template may use, and what each holds (the docs list them from here).
VARIABLES: Mapping[str, str] = {
    "date": "the run's start date, UTC (YYYY-MM-DD)",
    "time": "the run's start time, UTC (HH:MM)",
    "weekday": "the run's start weekday, UTC (Monday)",
    "caller": "the name of the caller who started the run",
    "agent": "the agent's id",
    "tenant": "the run's tenant",
}
VALUE_CHARS = 64  # a value is cut to this many characters
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `{name.attr}`, `{name[0]}`, `{name!r}`, `{name:>10}`: str.format's field syntax.
_FIELD = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*[.\[!:]")
_KEPT_PUNCTUATION = frozenset("._-@+ ")


class TemplateError(ValueError):
    """A template that uses what this templater does not offer; the message says what."""


def check(template: str) -> None:
    """Raise `TemplateError` naming the first unknown variable or field syntax."""
    for found in _TOKEN.finditer(template):
        inner = found.group(1)
        if inner is None:
            continue
        if _NAME.fullmatch(inner):
            if inner not in VARIABLES:
                known = ", ".join(f"{{{v}}}" for v in VARIABLES)
                raise TemplateError(
                    f"unknown template variable {{{inner}}}; the variables are {known} "
                    "(write {{ and }} for literal braces)"
                )
        elif _FIELD.match(inner):
            raise TemplateError(
                f"'{{{inner}}}': only plain {{name}} variables are supported (no attributes, "
                "indexes, conversions or format specs); write {{ and }} for literal braces"
            )


def render(template: str, values: Mapping[str, str]) -> str:
    """`template` with each known `{name}` replaced by its neutralised value, in one pass.
    A variable `values` lacks renders as nothing (`check` refused unknown ones already)."""

    def replace(found: re.Match[str]) -> str:
        token, inner = found.group(0), found.group(1)
        if inner is None:
            return token[0]  # `{{` -> `{`, `}}` -> `}`
        if _NAME.fullmatch(inner) and inner in VARIABLES:
            return neutral(values.get(inner, ""))
        return token

    return _TOKEN.sub(replace, template)


def neutral(value: str) -> str:
    """`value` as a template may show it: the kept characters only, runs of spaces (any
    whitespace) as one, cut to `VALUE_CHARS`."""
    kept = "".join(
        ch
        if ch.isalnum() or ch in _KEPT_PUNCTUATION or _clock_colon(value, i)
        else " "
        if ch.isspace()
        else ""
        for i, ch in enumerate(value)
    )
    return " ".join(kept.split())[:VALUE_CHARS].strip()


def _clock_colon(value: str, index: int) -> bool:
    """A colon between two ASCII digits (`04:05`), which no role marker is."""
    return (
        value[index] == ":"
        and 0 < index < len(value) - 1
        and value[index - 1] in "0123456789"
        and value[index + 1] in "0123456789"
    )


def check_arguments(arguments: Any) -> None:
    """`check` every string in a JSON value (keys are never templated)."""
    for text in _strings(arguments):
        check(text)


def render_arguments(arguments: Any, values: Mapping[str, str]) -> Any:
    """A JSON value with every string rendered (keys kept as written)."""
    if isinstance(arguments, str):
        return render(arguments, values)
    if isinstance(arguments, list):
        return [render_arguments(item, values) for item in arguments]
    if isinstance(arguments, dict):
        return {key: render_arguments(item, values) for key, item in arguments.items()}
    return arguments


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


def run_values(started: datetime, *, caller: str | None, agent: str, tenant: str) -> dict[str, str]:
    """The variables' values for a run started at `started` by `caller` (UTC)."""
    started = started.astimezone(UTC)
    return {
        "date": started.strftime("%Y-%m-%d"),
        "time": started.strftime("%H:%M"),
        "weekday": started.strftime("%A"),
        "caller": caller or "",
        "agent": agent,
        "tenant": tenant,
    }
