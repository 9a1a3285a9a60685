"""Durable runs in PostgreSQL: creating a run, the one fenced commit per step (the run
row, its journal and audit records), the inbox of queued user messages, loading a run
back. Every commit is fenced by the lease token, so a replica that lost the run cannot
write after it. Lease SQL is `leases.RunLeases`, reads are `queries.RunQueries`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.persistence.leases import RunLeases
from tether_brain.persistence.queries import RunQueries
from tether_brain.persistence.tables import inbox, journal, row_values, runs, state_of
from tether_brain.state.run import RunState
from tether_common import audit
from tether_common.errors import ConflictError, ErrorCode, NotFoundError
from tether_common.messages.runs import LIVE_STATUSES, TERMINAL_STATUSES

__all__ = ["COMMIT_STEP", "RunStore"]

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
            journal_seq = :journal_seq, event_seq = :event_seq,
            input_tokens = :input_tokens, output_tokens = :output_tokens, cost = :cost,
            usage_estimated = :usage_estimated, updated_at = :updated_at,
            counters = CAST(:counters AS jsonb), active_seconds = :active_seconds,
            audit_head = CAST(:audit_head AS varchar),
            lease_owner = CASE WHEN :release THEN NULL ELSE lease_owner END,
            lease_expires_at = CASE WHEN :release THEN NULL ELSE lease_expires_at END
        WHERE run_id = :run_id AND fence = :fence AND lease_expires_at > now()
        RETURNING run_id
    ), journaled AS (
        INSERT INTO run_journal (run_id, seq, kind, data, created_at)
        SELECT f.run_id, j.seq, j.kind, CAST(j.data AS jsonb), :updated_at
        FROM fenced f, unnest(
            CAST(:j_seq AS bigint[]), CAST(:j_kind AS varchar[]), CAST(:j_data AS text[])
        ) AS j(seq, kind, data)
    ), audited AS (
        {_audit_insert()}
    )
    SELECT count(*) FROM fenced
    """
)


class RunStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # The same pool; a connection taken through this one runs each statement alone.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.leases = RunLeases(engine)
        self.queries = RunQueries(engine)

    async def create(
        self,
        state: RunState,
        *,
        owner: str,
        lease_s: float,
        conn: AsyncConnection | None = None,
    ) -> None:
        """Insert the run's row, leased to `owner`; in `conn`'s transaction when given (a
        thread's turn commits its run with the turn)."""
        limits = {k: v for k, v in asdict(state.limits).items() if k != "max_steps"}
        values = row_values(state) | {
            "run_id": state.run_id,
            "prompt": state.prompt,
            "provider": state.provider,
            "model": state.model,
            "max_steps": state.max_steps,
            "fence": state.fence,
            "options": state.options.stored(),
            "limits": limits,
            "created_at": state.created_at,
            "parent_id": state.parent_id,
            "depth": state.depth,
            "tenant": state.tenant,
            "owner": state.owner,
            "lease_owner": owner,
            "lease_expires_at": func.now() + timedelta(seconds=lease_s),
        }
        if conn is not None:
            await conn.execute(runs.insert().values(values))
            return
        async with self.engine.begin() as own:
            await own.execute(runs.insert().values(values))

    def _journal_rows(self, state: RunState, now: datetime) -> list[dict[str, Any]]:
        rows = []
        for entry in state.pending:
            state.journal_seq += 1
            rows.append(
                {
                    "run_id": state.run_id,
                    "seq": state.journal_seq,
                    "kind": entry.kind,
                    "data": entry.data,
                    "created_at": now,
                }
            )
        return rows

    async def commit(self, state: RunState, conn: AsyncConnection | None = None) -> None:
        """Append the step's pending entries and the new counters in one fenced commit.
        A run that leaves the live states gives its lease up in the same commit.

        One statement: the fenced update of the run row, and the journal and audit
        inserts only if it matched; on its own connection it runs in autocommit, so a
        step costs one round trip to PostgreSQL."""
        if conn is None:
            async with self._autocommit.connect() as own:
                return await self.commit(state, own)
        now = datetime.now(UTC)
        seq_before = state.journal_seq
        rows = self._journal_rows(state, now)
        values = row_values(state)
        counters = values.pop("counters")
        records: list[dict[str, Any]] = []
        head = state.audit_head
        if state.audit:
            # The lease holder alone writes this trail, so its head is known.
            # (A writer that lost the lease fails the fence, or the trail's key.)
            records, head = audit.chain(
                state.run_id, state.counters.audit_next, state.audit_head, state.audit, now
            )
            counters["audit_next"] = state.counters.audit_next + len(state.audit)
        params = {
            "run_id": state.run_id,
            "fence": state.fence,
            **values,
            "updated_at": now,
            "counters": json.dumps(counters),
            "audit_head": head,
            "release": state.status not in LIVE_STATUSES,
            "j_seq": [r["seq"] for r in rows],
            "j_kind": [r["kind"] for r in rows],
            "j_data": [json.dumps(r["data"]) for r in rows],
            **{f"a_{c.name}": [r[c.name] for r in records] for c in AUDIT_COLUMNS},
        }
        try:
            if (await conn.execute(COMMIT_STEP, params)).scalar_one() != 1:
                raise ConflictError(
                    f"run {state.run_id} is no longer ours (fence {state.fence}, or its lease ran out)"
                )
        except BaseException:
            state.journal_seq = seq_before
            raise
        state.updated_at = now
        state.published, state.pending = state.pending, []
        if state.audit:
            state.audit_head = head
            state.counters.audit_next += len(state.audit)
        state.audit = []

    async def finish_unless_queued(
        self, state: RunState, finishing: Callable[[], None]
    ) -> list[str]:
        """At an answer boundary: hand back queued user messages if any (the run goes on),
        else commit the ending. The run row is locked so a message queued at the same
        moment is either delivered or refused, never lost."""
        async with self.engine.begin() as conn:
            await conn.execute(
                select(runs.c.run_id).where(runs.c.run_id == state.run_id).with_for_update()
            )
            queued = (
                await conn.execute(
                    select(inbox.c.id, inbox.c.text)
                    .where(inbox.c.run_id == state.run_id, inbox.c.delivered.is_(False))
                    .order_by(inbox.c.id)
                )
            ).all()
            if queued:
                await conn.execute(
                    update(inbox)
                    .where(inbox.c.id.in_([r.id for r in queued]))
                    .values(delivered=True)
                )
                return [r.text for r in queued]
            finishing()
            await self.commit(state, conn)
            return []

    async def queue_message(self, run_id: str, message: str) -> str:
        """Queue a user message for a live run; returns the run's status."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(runs.c.status).where(runs.c.run_id == run_id).with_for_update()
                )
            ).first()
            if row is None:
                raise NotFoundError(f"no run '{run_id}'")
            if row.status in TERMINAL_STATUSES:
                raise ConflictError(
                    f"run {run_id} has ended ({row.status})", code=ErrorCode.RUN_ENDED
                )
            await conn.execute(
                inbox.insert().values(run_id=run_id, text=message, created_at=datetime.now(UTC))
            )
            return str(row.status)

    async def load(self, run_id: str) -> RunState:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).first()
            if row is None:
                raise NotFoundError(f"no run '{run_id}'")
            entries = await conn.execute(
                select(journal.c.kind, journal.c.data)
                .where(journal.c.run_id == run_id, journal.c.kind != "event")
                .order_by(journal.c.seq)
            )
            state = state_of(row)
            for kind, data in entries:
                state.replay(kind, data)
        return state

    async def request_stop(self, run_id: str) -> str:
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.run_id == run_id)
                    .values(stop_requested=True)
                    .returning(runs.c.status)
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row.status)
