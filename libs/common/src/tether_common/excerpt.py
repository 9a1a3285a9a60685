"""What operators read of a call's arguments (run events, approval cards and notices):
long strings cut at 2,000 characters (DESIGN §2), saying how much was left out."""

from __future__ import annotations

from typing import Any

CUT_CHARS = 2000


def cut(value: Any) -> Any:
    """`value` with every string in it longer than `CUT_CHARS` cut there."""
    if isinstance(value, str) and len(value) > CUT_CHARS:
        return value[:CUT_CHARS] + f"… [{len(value) - CUT_CHARS} more characters]"
    if isinstance(value, dict):
        return {k: cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cut(v) for v in value]
    return value
