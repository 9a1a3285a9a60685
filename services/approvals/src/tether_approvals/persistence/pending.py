"""The approvals-pending gauge, read from PostgreSQL rather than counted in memory.

A count kept in memory (+1 on create, −1 when a request leaves pending) drifts for good
the first time a replica restarts with requests pending, and a request created on one
replica and decided on another moves two series. The rows are the truth, so each
replica re-reads the count on every sweep tick and moves the declared up-down counter by
the difference from what it last reported: the series then always equals the count as of
the last tick (≤ `sweep_interval_s` old), from the first tick after a restart on.

Every replica reports the whole count, so a dashboard aggregates replicas with `max`,
not `sum`.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_approvals.persistence.tables import approvals
from tether_common.metrics import approvals_pending


class PendingGauge:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._reported = 0
        approvals_pending.add(0)  # the series exists from the start: its panel reads 0

    async def refresh(self) -> int:
        """Read the count of pending requests and report it; returns the count."""
        query = select(func.count()).select_from(approvals).where(approvals.c.status == "pending")
        async with self.engine.connect() as conn:
            count = int((await conn.execute(query)).scalar_one())
        if count != self._reported:
            approvals_pending.add(count - self._reported)
            self._reported = count
        return count
