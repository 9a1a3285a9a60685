"""Quotas as arithmetic: the windows (a sliding minute of starts, the fixed UTC hour and
day of tokens and cost), what a scope (a tenant, or one agent of a tenant) has used in
them, and the verdict on a quota: the refusal that resets last, or none. No I/O: the
numbers are read under the tenant's lock by `persistence.quotas`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from tether_brain.state.run import DEFAULT_AGENT
from tether_common.errors import QuotaExceededError
from tether_common.messages.quotas import (
    LIMITS,
    Quota,
    QuotaLimit,
    QuotaRefusal,
    QuotaScope,
    QuotaUse,
)

Period = Literal["hour", "day"]
PERIODS: tuple[Period, ...] = ("hour", "day")
MINUTE = timedelta(seconds=60)
# No clock says when a running run ends: a refused start is told to look again this soon.
CONCURRENCY_RETRY_S = 2.0
TENANT_COUNTER = ""  # the `quota_usage.agent` of a tenant's own counter


def window_start(now: datetime, period: Period) -> datetime:
    """The start of the UTC hour or day `now` is in."""
    now = now.astimezone(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    return hour if period == "hour" else hour.replace(hour=0)


def window_end(now: datetime, period: Period) -> datetime:
    return window_start(now, period) + (
        timedelta(hours=1) if period == "hour" else timedelta(days=1)
    )


def agent_counter(agent_tenant: str, agent: str | None) -> str:
    """The `quota_usage.agent` of an agent's counter (ids never hold a `/`)."""
    return f"{agent_tenant}/{agent or DEFAULT_AGENT}"


@dataclass(frozen=True, slots=True)
class Spent:
    """The tokens and cost a counter holds for the window that started at `start`."""

    start: datetime
    tokens: int
    cost: float


@dataclass(frozen=True, slots=True)
class Use:
    """What one scope has used, read at `now` (the database's clock): `live`, its runs
    not yet ended; `starts`, when its runs of the minute before `now` started (oldest
    first); `spent`, its counters by period (one of an earlier window counts nothing)."""

    now: datetime
    live: int = 0
    starts: Sequence[datetime] = ()
    spent: Mapping[Period, Spent] = field(default_factory=dict)

    def tokens(self, period: Period) -> int:
        found = self.spent.get(period)
        return found.tokens if found and found.start == window_start(self.now, period) else 0

    def cost(self, period: Period) -> float:
        found = self.spent.get(period)
        return found.cost if found and found.start == window_start(self.now, period) else 0.0

    def used(self, limit: QuotaLimit) -> float:
        match limit:
            case "concurrent_runs":
                return float(self.live)
            case "runs_per_minute":
                return float(sum(1 for t in self.starts if t > self.now - MINUTE))
            case "tokens_per_hour" | "tokens_per_day":
                return float(self.tokens(_period(limit)))
            case "cost_per_hour" | "cost_per_day":
                return self.cost(_period(limit))

    def resets_at(self, limit: QuotaLimit, allowed: float) -> datetime | None:
        """When the use of `limit` drops below `allowed` (None: when one of the live runs
        ends; a limit of 0 never frees: the end of its window is said)."""
        match limit:
            case "concurrent_runs":
                return None
            case "runs_per_minute":
                return self._minute_frees(int(allowed))
            case _:
                return window_end(self.now, _period(limit))

    def _minute_frees(self, allowed: int) -> datetime:
        """A start may be made once all but `allowed - 1` of the minute's starts are
        more than a minute old: when the one `allowed` places from the newest is."""
        recent = [t for t in self.starts if t > self.now - MINUTE]
        if allowed <= 0 or len(recent) < allowed:
            return self.now + MINUTE if allowed <= 0 else self.now
        return recent[len(recent) - allowed] + MINUTE


def _period(limit: QuotaLimit) -> Period:
    return "hour" if limit.endswith("_hour") else "day"


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose quota: a tenant's, or one agent's within a tenant (`agent` its id)."""

    kind: QuotaScope
    tenant: str
    agent: str | None = None

    def describe(self) -> str:
        if self.kind == "tenant":
            return f"tenant '{self.tenant}'"
        return f"agent '{self.agent}' in tenant '{self.tenant}'"


def refusal(quota: Quota, use: Use, scope: Scope, *, starting: bool) -> QuotaRefusal | None:
    """The limit of `quota` that refuses (for a start, `starting`: one more run would go
    past a run limit; otherwise only tokens and cost, spent up), the one that resets
    last when several do; None when none does."""
    found: list[QuotaRefusal] = []
    for limit, allowed in quota.limits().items():
        run_limit = limit in ("concurrent_runs", "runs_per_minute")
        if run_limit and not starting:
            continue
        used = use.used(limit)
        if used < allowed:
            continue
        resets = use.resets_at(limit, allowed)
        wait = CONCURRENCY_RETRY_S if resets is None else (resets - use.now).total_seconds()
        found.append(
            QuotaRefusal(
                scope=scope.kind,
                tenant=scope.tenant,
                agent=scope.agent,
                limit=limit,
                allowed=allowed,
                used=used,
                retry_after=round(max(wait, 0.0), 3),
                resets_at=resets,
            )
        )
    return max(found, key=lambda r: r.retry_after, default=None)


def usage(quota: Quota, use: Use) -> list[QuotaUse]:
    """Every limit (set or not) and its use now."""
    limits = quota.limits()
    return [
        QuotaUse(
            limit=name,
            allowed=limits.get(name),
            used=use.used(name),
            resets_at=use.resets_at(name, limits[name]) if name in limits else None,
        )
        for name in LIMITS
    ]


def exceeded(found: QuotaRefusal) -> QuotaExceededError:
    """The `quota_exceeded` error of a refusal: which limit, the use, when it resets."""
    whose = Scope(found.scope, found.tenant, found.agent).describe()
    amount = _amount(found.limit, found.used, found.allowed)
    when = (
        "when one of its running runs ends"
        if found.resets_at is None
        else f"at {found.resets_at.isoformat(timespec='seconds')}"
    )
    return QuotaExceededError(
        f"the {found.limit} quota of {whose} is used up ({amount}); it frees {when} "
        f"(retry after {found.retry_after:g} s)",
        retry_after=found.retry_after,
        details=found.model_dump(mode="json"),
    )


def _amount(limit: QuotaLimit, used: float, allowed: float) -> str:
    if limit.startswith("cost"):
        return f"{used:.4f} of {allowed:g}"
    return f"{int(used)} of {int(allowed)}"
