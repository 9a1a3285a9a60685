"""A step's one write: the fenced statement (`COMMIT_STEP`), its parameters built from a
run's state (`step_write`), and running it as one prepared statement on the pooled
asyncpg connection (`execute_step`), so a step costs one round trip and no parsing,
planning or type look-up in PostgreSQL after a connection's first commit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pydantic_core
from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

from tether_brain.persistence.raw import DRIVER_ERRORS, database_error, driver_of
from tether_brain.persistence.tables import row_values
from tether_brain.state.run import RunState
from tether_common import audit
from tether_common.messages.runs import LIVE_STATUSES

__all__ = ["COMMIT_SQL", "COMMIT_STEP", "StepWrite", "execute_step", "step_write"]

# The audit rows' columns and their PostgreSQL types, as `tether_common.audit` declares them.
AUDIT_COLUMNS = [c for c in audit.records.columns if c.name != "run_id"]


def _audit_insert() -> str:
    """The commit's insert of audit records, one array parameter per column."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy
    names = ", ".join(c.name for c in AUDIT_COLUMNS)
    arrays = ", ".join(
        f"CAST(:a_{c.name} AS {c.type.compile(dialect=dialect)}[])" for c in AUDIT_COLUMNS
    )
    picked = ", ".join(f"a.{c.name}" for c in AUDIT_COLUMNS)
    return (
        f"INSERT INTO {audit.records.name} (run_id, {names}) SELECT f.run_id, {picked} "
        f"FROM fenced f, unnest({arrays}) AS a({names})"
    )


# A metered run's step adds what it spent since its last commit to each of its quota
# counters (`RunOptions.metered`: none for most runs, so nothing is written), in the
# current UTC hour and day on the database's clock; a counter of an earlier window starts
# again. `prior` is the run row as this statement found it, before `fenced` changed it.
_METER = """
        INSERT INTO quota_usage AS q (tenant, agent, period, window_start, tokens, cost)
        SELECT f.tenant, m.agent, p.period, date_trunc(p.period, now(), 'UTC'),
               GREATEST(CAST(:m_tokens AS bigint) - pr.tokens, 0),
               GREATEST(CAST(:m_cost AS double precision) - pr.cost, 0)
        FROM fenced f, prior pr, unnest(CAST(:m_counters AS varchar[])) AS m(agent),
             (VALUES ('hour'), ('day')) AS p(period)
        WHERE CAST(:m_tokens AS bigint) > pr.tokens OR CAST(:m_cost AS double precision) > pr.cost
        ON CONFLICT (tenant, agent, period) DO UPDATE SET
            window_start = GREATEST(q.window_start, EXCLUDED.window_start),
            tokens = CASE WHEN EXCLUDED.window_start > q.window_start THEN EXCLUDED.tokens
                          ELSE q.tokens + EXCLUDED.tokens END,
            cost = CASE WHEN EXCLUDED.window_start > q.window_start THEN EXCLUDED.cost
                        ELSE q.cost + EXCLUDED.cost END"""

# A step's whole write. The inserts join the fenced update's result, so they happen only
# if the fence held; the statement answers how many run rows it updated (0 or 1).
# Held means: the fence is still ours (every claim moves it on, so it names the holder
# better than the owner column, which a hand-back clears without a new fence) AND the
# lease has not run out by the database's clock, in this very statement. A replica that
# was paused or cut off past its lease therefore writes nothing even if nobody has
# claimed the run yet; the row lock orders this against a claim (`claim_orphans` waits
# for `lease_expires_at < now()`), so two holders never both commit.
COMMIT_STEP = text(
    f"""
    WITH fenced AS (
        UPDATE runs SET
            status = :status, stop_reason = :stop_reason, answer = :answer, step = :step,
            output = CAST(:output AS jsonb),
            journal_seq = :journal_seq, event_seq = :event_seq,
            input_tokens = :input_tokens, output_tokens = :output_tokens, cost = :cost,
            usage_estimated = :usage_estimated, updated_at = :updated_at,
            counters = CAST(:counters AS jsonb), active_seconds = :active_seconds,
            audit_head = CAST(:audit_head AS varchar),
            lease_owner = CASE WHEN :release THEN NULL ELSE lease_owner END,
            lease_expires_at = CASE WHEN :release THEN NULL ELSE lease_expires_at END
        WHERE run_id = :run_id AND fence = :fence AND lease_expires_at > now()
        RETURNING run_id, tenant
    ), journaled AS (
        INSERT INTO run_journal (run_id, seq, kind, data, created_at)
        SELECT f.run_id, j.seq, j.kind, CAST(j.data AS jsonb), :updated_at
        FROM fenced f, unnest(
            CAST(:j_seq AS bigint[]), CAST(:j_kind AS varchar[]), CAST(:j_data AS text[])
        ) AS j(seq, kind, data)
    ), audited AS (
        {_audit_insert()}
    ), prior AS (
        SELECT input_tokens + output_tokens AS tokens, cost FROM runs
        WHERE run_id = :run_id AND cardinality(CAST(:m_counters AS varchar[])) > 0
    ), metered AS (
        {_METER}
    )
    SELECT count(*) FROM fenced
    """
)

# The same statement in asyncpg's own form ($1, $2, …) and the order of its parameters,
# compiled once from COMMIT_STEP (one text for both paths).
_COMPILED = COMMIT_STEP.compile(dialect=pg_asyncpg.dialect())  # type: ignore[no-untyped-call]
COMMIT_SQL: str = _COMPILED.string
COMMIT_ORDER: tuple[str, ...] = tuple(_COMPILED.positiontup or ())


def _json(value: Any) -> str:
    """JSON text for a jsonb parameter, by pydantic's serialiser (a step writes a dozen)."""
    return pydantic_core.to_json(value).decode()


@dataclass(slots=True)
class StepWrite:
    """One step's commit, built from the state without changing it; `applied` moves the
    state on once the commit has returned."""

    params: dict[str, Any]
    now: datetime
    journal_seq: int
    audit_head: str | None
    audit_count: int

    def args(self) -> list[Any]:
        """The parameters in `COMMIT_SQL`'s order."""
        return [self.params[name] for name in COMMIT_ORDER]

    def applied(self, state: RunState) -> None:
        state.journal_seq = self.journal_seq
        state.updated_at = self.now
        state.published, state.pending = state.pending, []
        if self.audit_count:
            state.audit_head = self.audit_head
            state.counters.audit_next += self.audit_count
        state.audit = []


def step_write(state: RunState) -> StepWrite:
    """The commit of `state`'s pending journal entries, audit records and counters."""
    now = datetime.now(UTC)
    first = state.journal_seq + 1
    values = row_values(state)
    counters = values.pop("counters")
    output = values.pop("output")
    records: list[dict[str, Any]] = []
    head = state.audit_head
    if state.audit:
        # The lease holder alone writes this trail, so its head is known.
        # (A writer that lost the lease fails the fence, or the trail's key.)
        records, head = audit.chain(
            state.run_id, state.counters.audit_next, state.audit_head, state.audit, now
        )
        counters["audit_next"] = state.counters.audit_next + len(state.audit)
    last = state.journal_seq + len(state.pending)
    params = {
        "run_id": state.run_id,
        "fence": state.fence,
        **values,
        "journal_seq": last,
        "updated_at": now,
        "counters": _json(counters),
        "output": None if output is None else _json(output),
        "audit_head": head,
        "release": state.status not in LIVE_STATUSES,
        "j_seq": list(range(first, last + 1)),
        "j_kind": [e.kind for e in state.pending],
        "j_data": [e.text for e in state.pending],
        "m_counters": list(state.options.metered),
        "m_tokens": state.usage.input_tokens + state.usage.output_tokens,
        "m_cost": state.usage.cost,
        **{f"a_{c.name}": [r[c.name] for r in records] for c in AUDIT_COLUMNS},
    }
    return StepWrite(params, now, last, head, len(state.audit))


async def execute_step(conn: AsyncConnection, write: StepWrite) -> int:
    """Run the commit on `conn` (in its transaction, if one is open); the run rows it
    updated, 0 or 1. Straight on the asyncpg connection (`raw`): prepared once per
    connection, none of SQLAlchemy's per-execution work."""
    driver = await driver_of(conn)
    try:
        found = await driver.fetchval(COMMIT_SQL, *write.args())
    except DRIVER_ERRORS as exc:
        raise await database_error(conn, driver, COMMIT_SQL, exc) from exc
    return int(found)
