"""What the shell classifier answers: a decision, a danger level, categories and reasons."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

Decision = Literal["allow", "ask", "deny"]
Category = Literal[
    "read",
    "write",
    "destructive",
    "privileged",
    "network",
    "install",
    "opaque",
    "protected",
    "unknown",
]


class Danger(IntEnum):
    """How bad the worst reading of a command is; ordered so `max` picks the worst."""

    NONE = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4


_RANK: dict[Decision, int] = {"allow": 0, "ask": 1, "deny": 2}

DANGER_OF: dict[Category, Danger] = {
    "read": Danger.NONE,
    "protected": Danger.MEDIUM,
    "unknown": Danger.MEDIUM,
    "write": Danger.MEDIUM,
    "network": Danger.MEDIUM,
    "opaque": Danger.MEDIUM,
    "install": Danger.HIGH,
    "destructive": Danger.HIGH,
    "privileged": Danger.HIGH,
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation about one part of a command line."""

    decision: Decision
    danger: Danger
    category: Category
    reason: str


def allow(reason: str) -> Finding:
    return Finding("allow", Danger.NONE, "read", reason)


def ask(category: Category, reason: str) -> Finding:
    return Finding("ask", DANGER_OF[category], category, reason)


def deny(reason: str, category: Category = "destructive") -> Finding:
    return Finding("deny", Danger.CRITICAL, category, reason)


@dataclass(frozen=True, slots=True)
class ShellVerdict:
    """The classifier's answer for a whole command line.

    `decision` is the strictest of all findings (deny > ask > allow); `reasons` lists the
    findings behind that decision first, so the first reason is the one to show.
    """

    decision: Decision
    danger: Danger
    reasons: tuple[str, ...]
    categories: frozenset[Category]
    opaque: bool

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @property
    def denied(self) -> bool:
        return self.decision == "deny"


def verdict_from(findings: Iterable[Finding]) -> ShellVerdict:
    """Fold findings into one verdict; no findings at all means "ask" (nothing to vouch for)."""
    found = list(findings)
    if not found:
        found = [ask("unknown", "empty command")]
    decision = max((f.decision for f in found), key=_RANK.__getitem__)
    # An "allow" reason next to an "ask" only confuses: show what made it stricter.
    shown = found if decision == "allow" else [f for f in found if f.decision != "allow"]
    shown.sort(key=lambda f: -_RANK[f.decision])
    categories = frozenset(f.category for f in found)
    return ShellVerdict(
        decision=decision,
        danger=max(f.danger for f in found),
        reasons=tuple(dict.fromkeys(f.reason for f in shown)),
        categories=categories,
        opaque="opaque" in categories,
    )
