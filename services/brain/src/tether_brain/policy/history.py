"""An agent's recorded history for policy what-if: its runs in a time window, each with
the audit records the gates and approvals wrote and the calls its journal holds.

The audit trail says what was decided (tool, argument digests, decision, gate codes, the
approval and who decided it) but never argument values (DESIGN §4); the run journal
holds the calls with their values. `linking.py` joins the two by digest, so a journal
row that no longer matches its audit record is not re-decided.

A run is in the window when its life overlaps it (made before `until`, last changed at or
after `since`); its calls are the ones whose decision was recorded inside the window.
Runs are read oldest first, at most `max_runs` per answer (`complete` false, and
`next_since` where the next answer starts), and only those of the tenant the caller may
read runs of: an agent id deleted and made again in another tenant does not show the
first tenant's calls to the second's operators."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.persistence.tables import journal, runs
from tether_brain.state.options import RunOptions
from tether_brain.state.run import DEFAULT_AGENT
from tether_common import audit
from tether_common.messages.gateway import CallRecord, ChatMessage

__all__ = ["MAX_RUNS", "AuditRow", "History", "RunHistory", "read_history"]

MAX_RUNS = 500  # runs read for one answer
# The records that say what happened to a call (tool.result: what tainted the run).
EVENTS = ("gate.decision", "approval.requested", "approval.decided", "tool.result")


@dataclass(frozen=True, slots=True)
class AuditRow:
    seq: int
    event: str
    data: dict[str, Any]
    ts: datetime


@dataclass(slots=True)
class RunHistory:
    run_id: str
    options: RunOptions
    owner: str | None
    records: list[AuditRow] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)  # in the order they were made


@dataclass(frozen=True, slots=True)
class History:
    runs: list[RunHistory]
    complete: bool = True
    next_since: datetime | None = None


def _agent_runs(
    agent: str, since: datetime, until: datetime, limit: int, tenant: str | None
) -> Any:
    run_agent = func.coalesce(runs.c.options["agent"].astext, DEFAULT_AGENT)
    query = select(runs.c.run_id, runs.c.options, runs.c.owner, runs.c.created_at).where(
        run_agent == agent, runs.c.created_at < until, runs.c.updated_at >= since
    )
    if tenant is not None:
        query = query.where(runs.c.tenant == tenant)
    return query.order_by(runs.c.created_at, runs.c.run_id).limit(limit)


async def read_history(
    engine: AsyncEngine,
    agent: str,
    since: datetime,
    until: datetime,
    *,
    tenant: str | None,
    max_runs: int = MAX_RUNS,
) -> History:
    """The agent's runs in the window (of `tenant`; None: every tenant's) with their
    records and calls, in one snapshot."""
    async with engine.connect() as conn:
        query = _agent_runs(agent, since, until, max_runs + 1, tenant)
        rows = (await conn.execute(query)).all()
        more = len(rows) > max_runs
        rows = rows[:max_runs]
        found = {
            r.run_id: RunHistory(r.run_id, RunOptions.model_validate(r.options), r.owner)
            for r in rows
        }
        ids = list(found)
        if ids:
            await _fill(conn, found, ids, until)
    next_since = rows[-1].created_at if more and rows else None
    return History(list(found.values()), complete=not more, next_since=next_since)


async def _fill(conn: Any, found: dict[str, RunHistory], ids: list[str], until: datetime) -> None:
    records = audit.records
    # Every record up to `until`: those before `since` rebuild the run's state (taint,
    # remembered grants); only decisions inside the window are re-decided.
    query = (
        select(records.c.run_id, records.c.seq, records.c.event, records.c.data, records.c.ts)
        .where(records.c.run_id.in_(ids), records.c.event.in_(EVENTS), records.c.ts < until)
        .order_by(records.c.run_id, records.c.seq)
    )
    for row in (await conn.execute(query)).all():
        data = json.loads(row.data)
        found[row.run_id].records.append(AuditRow(row.seq, row.event, data, row.ts))
    assistant = (
        select(journal.c.run_id, journal.c.data)
        .where(
            journal.c.run_id.in_(ids),
            journal.c.kind == "message",
            journal.c.data["role"].astext == "assistant",
        )
        .order_by(journal.c.run_id, journal.c.seq)
    )
    for row in (await conn.execute(assistant)).all():
        message = ChatMessage.model_validate(row.data)
        found[row.run_id].calls.extend(message.tool_calls)
