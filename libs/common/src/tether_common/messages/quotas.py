"""Quotas as the brain's API keeps and answers them: the limits of a tenant (`PUT
/v1/quotas/{tenant}`, admins) or of an agent (its definition's `quota`), a tenant's
quota with what is used of it now, and the `details` of a `quota_exceeded` refusal.

The windows: `runs_per_minute` counts the runs started in the last 60 seconds (a
sliding window); tokens and cost count what the model reported in the current UTC hour
and UTC day (fixed windows, on the database's clock); `concurrent_runs` counts the runs
not yet ended. Helper runs (sub-agents) run within their parent's slot and start: they
count toward tokens and cost only."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tether_common.messages.base import RequestModel

__all__ = [
    "LIMITS",
    "Quota",
    "QuotaBody",
    "QuotaLimit",
    "QuotaRefusal",
    "QuotaScope",
    "QuotaUse",
    "QuotaView",
]

QuotaLimit = Literal[
    "concurrent_runs",
    "runs_per_minute",
    "tokens_per_hour",
    "tokens_per_day",
    "cost_per_hour",
    "cost_per_day",
]
LIMITS: tuple[QuotaLimit, ...] = (
    "concurrent_runs",
    "runs_per_minute",
    "tokens_per_hour",
    "tokens_per_day",
    "cost_per_hour",
    "cost_per_day",
)
QuotaScope = Literal["tenant", "agent"]


class Quota(BaseModel):
    """Limits (None: none; 0: nothing at all). A tenant's apply to all its runs together;
    an agent's to each tenant's runs of it, within the tenant's own."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    concurrent_runs: int | None = Field(default=None, ge=0, le=1_000_000)
    runs_per_minute: int | None = Field(default=None, ge=0, le=1_000_000)
    tokens_per_hour: int | None = Field(default=None, ge=0, le=2**62)
    tokens_per_day: int | None = Field(default=None, ge=0, le=2**62)
    cost_per_hour: float | None = Field(default=None, ge=0, le=1e12)
    cost_per_day: float | None = Field(default=None, ge=0, le=1e12)

    def limits(self) -> dict[QuotaLimit, float]:
        """The limits set, by name."""
        found = {name: getattr(self, name) for name in LIMITS}
        return {name: float(value) for name, value in found.items() if value is not None}

    @property
    def metered(self) -> bool:
        """Whether it limits tokens or cost (a run under it counts what it spends)."""
        return any(
            v is not None
            for v in (
                self.tokens_per_hour,
                self.tokens_per_day,
                self.cost_per_hour,
                self.cost_per_day,
            )
        )


class QuotaRefusal(BaseModel):
    """A `quota_exceeded` error's `details`: which quota and limit refused, what is used
    of it, and when it resets (`resets_at` None: when one of the runs counted ends)."""

    scope: QuotaScope
    tenant: str
    agent: str | None = None
    limit: QuotaLimit
    allowed: float
    used: float
    retry_after: float
    resets_at: datetime | None = None


class QuotaUse(BaseModel):
    """One limit of a quota and what is used of it now."""

    limit: QuotaLimit
    allowed: float | None
    used: float
    resets_at: datetime | None = None


class QuotaBody(RequestModel):
    """A tenant's whole quota (`PUT` replaces it; every limit left out is none);
    `version`: the one it replaces."""

    quota: Quota
    version: int | None = Field(default=None, ge=0)


class QuotaView(BaseModel):
    """A tenant's quota as stored (version 0: never set) and its use now."""

    tenant: str
    quota: Quota
    version: int
    changed_by: str | None = None
    changed_at: datetime | None = None
    usage: list[QuotaUse] = Field(default_factory=list)
