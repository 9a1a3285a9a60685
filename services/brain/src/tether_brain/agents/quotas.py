"""Quotas in force: a run's start admitted or refused `quota_exceeded` by its tenant's
quota and its agent's, and a running run's tokens and cost held to them.

Admission happens in the transaction that inserts the run (`RunStore.create(admit=)`):
when either quota sets a limit, the tenant's lock is taken (`persistence.quotas`), so
every replica's gated starts of one tenant count and insert one at a time, and a start
counts every run committed before it. Concurrent runs and starts are read from `runs`
(a run frees its slot by ending, however it ends: nothing to leak); a run whose quotas
limit tokens or cost is `metered` (`RunOptions.metered`): each of its steps adds what
the model reported to its counters in the step's own commit. Such a run over a quota
finishes the step that went past it, and stops `quota_exceeded` before the next
(`Loop`). A quota set while a run is under way meters only the runs started after."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.agents.config import Agents
from tether_brain.persistence import quotas as sql
from tether_brain.state.quotas import (
    TENANT_COUNTER,
    Scope,
    agent_counter,
    exceeded,
    refusal,
    usage,
)
from tether_brain.state.run import DEFAULT_AGENT, RunState
from tether_common.messages.quotas import Quota, QuotaRefusal, QuotaUse


def _agent_of(state: RunState) -> tuple[str, str, str]:
    """The run's agent: its tenant, id and counter key."""
    agent_tenant = state.options.agent_tenant or state.tenant
    agent = state.options.agent or DEFAULT_AGENT
    return agent_tenant, agent, agent_counter(agent_tenant, agent)


class Quotas:
    def __init__(self, engine: AsyncEngine, agents: Agents) -> None:
        self.engine = engine
        self.agents = agents

    def _agent_quota(self, state: RunState) -> Quota:
        return self.agents.of_run(state.options, state.tenant).quota

    async def admit(self, conn: AsyncConnection, state: RunState) -> None:
        """Refuse the start of `state` (`quota_exceeded`) if a quota says so; else mark
        what it meters and date it by the database's clock. In the transaction that
        inserts it, which then holds the tenant's lock until it commits."""
        quotas = (await sql.tenant_quota(conn, state.tenant), self._agent_quota(state))
        if not any(q.limits() for q in quotas):
            return
        now = await sql.lock_tenant(conn, state.tenant)
        agent = _agent_of(state)
        starts = any(q.runs_per_minute is not None for q in quotas)
        uses = await sql.use_of(conn, state.tenant, agent, now, starts=starts)
        scopes = (Scope("tenant", state.tenant), Scope("agent", state.tenant, agent[1]))
        refused = _last_to_reset(
            refusal(q, u, s, starting=True) for q, u, s in zip(quotas, uses, scopes, strict=True)
        )
        if refused is not None:
            raise exceeded(refused)
        counters = (TENANT_COUNTER, agent[2])
        metered = tuple(key for q, key in zip(quotas, counters, strict=True) if q.metered)
        state.options = state.options.model_copy(update={"metered": metered})
        # The minute of starts is then counted on one clock, whichever replica started it.
        state.created_at = state.updated_at = now

    async def spent_up(self, state: RunState) -> QuotaRefusal | None:
        """For a metered run, between steps: the quota whose tokens or cost are spent
        (None: none is, or the run is not metered)."""
        if not state.options.metered:
            return None
        agent = _agent_of(state)
        async with self.engine.connect() as conn:
            tenant = await sql.tenant_quota(conn, state.tenant)
            now = await sql.clock(conn)
            uses = await sql.use_of(conn, state.tenant, agent, now, starts=False)
        quotas = (tenant, self._agent_quota(state))
        scopes = (Scope("tenant", state.tenant), Scope("agent", state.tenant, agent[1]))
        return _last_to_reset(
            refusal(q, u, s, starting=False) for q, u, s in zip(quotas, uses, scopes, strict=True)
        )

    async def of_tenant(self, tenant: str) -> tuple[Quota, list[QuotaUse]]:
        """The tenant's quota and what is used of it now."""
        async with self.engine.connect() as conn:
            quota = await sql.tenant_quota(conn, tenant)
            now = await sql.clock(conn)
            nobody = ("", "", "/")  # no agent (ids hold no "/"): only the tenant's own use
            use, _ = await sql.use_of(conn, tenant, nobody, now, starts=True)
        return quota, usage(quota, use)


def _last_to_reset(found: Iterable[QuotaRefusal | None]) -> QuotaRefusal | None:
    """Of the scopes' refusals, the one that resets last: retrying sooner cannot succeed."""
    refusals = [r for r in found if r is not None]
    return max(refusals, key=lambda r: r.retry_after, default=None)


__all__ = ["Quotas"]
