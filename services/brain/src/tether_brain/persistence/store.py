"""Durable runs in PostgreSQL: the run row (status, counters, lease) and the append-only
journal. A step becomes durable when its one commit returns; every commit is fenced by
the lease token, so a replica that lost the run cannot write after it.

Leases use the database clock (`now()`), so replicas need not agree on time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_brain.state.run import DEFAULT_AGENT, Counters, Limits, RunState
from tether_common import audit
from tether_common.errors import ConflictError, NotFoundError
from tether_common.identity import RowFilter
from tether_common.messages.runs import TERMINAL_STATUSES, Usage

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("status", String(32), nullable=False, index=True),
    Column("stop_reason", Text),
    Column("prompt", Text, nullable=False),
    Column("answer", Text),
    Column("provider", String(64), nullable=False),
    Column("model", String(200)),
    Column("max_steps", Integer, nullable=False),
    Column("step", Integer, nullable=False),
    Column("journal_seq", BigInteger, nullable=False),
    Column("event_seq", BigInteger, nullable=False),
    Column("fence", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost", Float, nullable=False),
    Column("usage_estimated", Integer, nullable=False),
    Column("options", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, index=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("takeovers", Integer, nullable=False, server_default="0"),
    Column("last_takeover_step", Integer, nullable=False, server_default="-1"),
    Column("stop_requested", Boolean, nullable=False, server_default="false"),
    Column("limits", JSONB, nullable=False, server_default="{}"),
    Column("counters", JSONB, nullable=False, server_default="{}"),
    Column("active_seconds", Float, nullable=False, server_default="0"),
    Column("parent_id", String(64), index=True),
    Column("audit_head", String(64)),
    Column("depth", Integer, nullable=False, server_default="0"),
    # Whose run: its principal's tenant and name (migration 0007); sub-agents inherit both.
    Column("tenant", String(200), nullable=False, server_default="default"),
    Column("owner", String(200)),
)

journal = Table(
    "run_journal",
    metadata,
    Column("run_id", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("data", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
)

inbox = Table(
    "run_inbox",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("text", Text, nullable=False),
    Column("delivered", Boolean, nullable=False, server_default="false"),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

LIVE = ("queued", "running")
EVERY_RUN = RowFilter(None, None)
LISTED_PROMPT_CHARS = 200

AUDIT_COLUMNS = ("seq", "event", "data", "prev_digest", "nonce", "ts", "digest")
# A step's whole write. The inserts join the fenced update's result, so they happen only
# if the fence held; the statement answers how many run rows it updated (0 or 1).
# Held means: the fence is still ours (every claim moves it on, so it names the holder
# better than the owner column, which a hand-back clears without a new fence) AND the
# lease has not run out by the database's clock, in this very statement. A replica that
# was paused or cut off past its lease therefore writes nothing even if nobody has
# claimed the run yet; the row lock orders this against a claim (`claim_orphans` waits
# for `lease_expires_at < now()`), so two holders never both commit.
COMMIT_STEP = text(
    """
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
        INSERT INTO audit_records (run_id, seq, event, data, prev_digest, nonce, ts, digest)
        SELECT f.run_id, a.seq, a.event, a.data, a.prev_digest, a.nonce, a.ts, a.digest
        FROM fenced f, unnest(
            CAST(:a_seq AS integer[]), CAST(:a_event AS varchar[]), CAST(:a_data AS text[]),
            CAST(:a_prev_digest AS varchar[]), CAST(:a_nonce AS varchar[]),
            CAST(:a_ts AS timestamptz[]), CAST(:a_digest AS varchar[])
        ) AS a(seq, event, data, prev_digest, nonce, ts, digest)
    )
    SELECT count(*) FROM fenced
    """
)


def _row_values(state: RunState) -> dict[str, Any]:
    return {
        "status": state.status,
        "stop_reason": state.stop_reason,
        "answer": state.answer,
        "step": state.step,
        "journal_seq": state.journal_seq,
        "event_seq": state.event_seq,
        "input_tokens": state.usage.input_tokens,
        "output_tokens": state.usage.output_tokens,
        "cost": state.usage.cost,
        "usage_estimated": int(state.usage.estimated),
        "updated_at": state.updated_at,
        "counters": state.counters.to_json(),
        "active_seconds": state.active_seconds,
    }


def _state(row: Any) -> RunState:
    return RunState(
        run_id=row.run_id,
        prompt=row.prompt,
        provider=row.provider,
        model=row.model,
        limits=Limits(**({"max_steps": row.max_steps} | row.limits)),
        created_at=row.created_at,
        updated_at=row.updated_at,
        status=row.status,
        stop_reason=row.stop_reason,
        answer=row.answer,
        step=row.step,
        journal_seq=row.journal_seq,
        event_seq=row.event_seq,
        fence=row.fence,
        takeovers=row.takeovers,
        stop_requested=row.stop_requested,
        audit_head=row.audit_head,
        parent_id=row.parent_id,
        depth=row.depth,
        tenant=row.tenant,
        owner=row.owner,
        active_seconds=row.active_seconds,
        options=row.options,
        counters=Counters.from_json(row.counters),
        usage=Usage(
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost=row.cost,
            estimated=bool(row.usage_estimated),
        ),
    )


class RunStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # The same pool; a connection taken through this one runs each statement alone.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def create(self, state: RunState, *, owner: str, lease_s: float) -> None:
        limits = {k: v for k, v in asdict(state.limits).items() if k != "max_steps"}
        values = _row_values(state) | {
            "run_id": state.run_id,
            "prompt": state.prompt,
            "provider": state.provider,
            "model": state.model,
            "max_steps": state.max_steps,
            "fence": state.fence,
            "options": state.options,
            "limits": limits,
            "created_at": state.created_at,
            "parent_id": state.parent_id,
            "depth": state.depth,
            "tenant": state.tenant,
            "owner": state.owner,
            "lease_owner": owner,
            "lease_expires_at": func.now() + timedelta(seconds=lease_s),
        }
        async with self.engine.begin() as conn:
            await conn.execute(runs.insert().values(values))

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
        values = _row_values(state)
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
            "release": state.status not in LIVE,
            "j_seq": [r["seq"] for r in rows],
            "j_kind": [r["kind"] for r in rows],
            "j_data": [json.dumps(r["data"]) for r in rows],
            **{f"a_{key}": [r[key] for r in records] for key in AUDIT_COLUMNS},
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
                raise ConflictError(f"run {run_id} has ended ({row.status})", code="run_ended")
            await conn.execute(
                inbox.insert().values(run_id=run_id, text=message, created_at=datetime.now(UTC))
            )
            return str(row.status)

    async def listing(
        self,
        *,
        status: str | None,
        parent_id: str | None,
        before: datetime | None,
        limit: int,
        agent: str | None = None,
        since: datetime | None = None,
        scope: RowFilter = EVERY_RUN,
        owned_agents: Sequence[str] = (),
    ) -> list[Any]:
        """Run rows for a listing, newest first (the `created_at` index), within `scope`:
        its tenant, and (when it names an owner) the runs that owner started or whose
        agent (`options.agent`) is one of `owned_agents`."""
        run_agent = func.coalesce(runs.c.options["agent"].astext, DEFAULT_AGENT)
        query = select(
            runs.c.run_id,
            runs.c.status,
            runs.c.stop_reason,
            func.left(runs.c.prompt, LISTED_PROMPT_CHARS).label("prompt"),
            runs.c.provider,
            runs.c.model,
            runs.c.step,
            runs.c.parent_id,
            run_agent.label("agent"),
            runs.c.created_at,
            runs.c.updated_at,
            runs.c.tenant,
            runs.c.owner,
        )
        if scope.tenant is not None:
            query = query.where(runs.c.tenant == scope.tenant)
        if scope.owner is not None:
            mine = runs.c.owner == scope.owner
            if owned_agents:
                mine = or_(mine, runs.c.options["agent"].astext.in_(list(owned_agents)))
            query = query.where(mine)
        if status is not None:
            query = query.where(runs.c.status == status)
        if parent_id is not None:
            query = query.where(runs.c.parent_id == parent_id)
        if agent is not None:
            query = query.where(run_agent == agent)
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        if before is not None:
            query = query.where(runs.c.created_at < before)
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).all())

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
            state = _state(row)
            for kind, data in entries:
                state.replay(kind, data)
        return state

    async def belongs(self, run_id: str) -> tuple[str, str | None, str | None]:
        """(tenant, owner, agent) of a run, for an authorisation check before anything
        else is read (`not_found` when there is no such run)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs.c.tenant, runs.c.owner, runs.c.options["agent"].astext).where(
                        runs.c.run_id == run_id
                    )
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row[0]), row[1], row[2]

    async def status(self, run_id: str) -> tuple[str, bool]:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs.c.status, runs.c.stop_requested).where(runs.c.run_id == run_id)
                )
            ).first()
        if row is None:
            raise NotFoundError(f"no run '{run_id}'")
        return str(row.status), bool(row.stop_requested)

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

    async def renew(self, owner: str, lease_s: float, held: list[str]) -> list[str]:
        """Renew the leases of the runs this replica is still advancing (a run whose task
        died lets its lease lapse, so it is taken over); the runs renewed. Only a lease
        still running is extended: one that ran out stays out, even if nobody has
        claimed the run yet, since its holder may already have been fenced."""
        if not held:
            return []
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                text(
                    "UPDATE runs SET lease_expires_at = now() + make_interval(secs => :s) "
                    "WHERE lease_owner = :owner AND status IN ('queued', 'running') "
                    "AND lease_expires_at > now() AND run_id = ANY(:held) RETURNING run_id"
                ),
                {"s": lease_s, "owner": owner, "held": held},
            )
            return [r.run_id for r in rows]

    async def claim_orphans(self, owner: str, lease_s: float, limit: int) -> list[str]:
        """Take over live runs whose lease expired (their replica died or froze)."""
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                text(
                    "UPDATE runs SET lease_owner = :owner, "
                    "lease_expires_at = now() + make_interval(secs => :s), fence = fence + 1, "
                    "takeovers = CASE WHEN last_takeover_step = step THEN takeovers + 1 ELSE 1 END, "
                    "last_takeover_step = step "
                    "WHERE run_id IN (SELECT run_id FROM runs WHERE status IN ('queued', 'running') "
                    "AND (lease_expires_at IS NULL OR lease_expires_at < now()) "
                    "ORDER BY lease_expires_at NULLS FIRST LIMIT :limit FOR UPDATE SKIP LOCKED) "
                    "RETURNING run_id"
                ),
                {"owner": owner, "s": lease_s, "limit": limit},
            )
            return [r.run_id for r in rows]

    async def _claim(self, run_id: str, owner: str, lease_s: float, condition: str) -> bool:
        """Take a parked run for this replica (status running, a new lease, the fence moved
        on) if `condition` still holds; exactly one replica wins."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                text(
                    "UPDATE runs SET status = 'running', lease_owner = :owner, "
                    "lease_expires_at = now() + make_interval(secs => :s), fence = fence + 1 "
                    f"WHERE run_id = :run_id AND {condition}"
                ),
                {"owner": owner, "s": lease_s, "run_id": run_id},
            )
        return bool(result.rowcount == 1)

    async def claim_parked(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take a run parked for approval to resume it; False if it is not parked (already
        resumed by another replica, or a replayed decision)."""
        return await self._claim(run_id, owner, lease_s, "status = 'awaiting_approval'")

    async def claim_waiting(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take a parent parked for its sub-agents once none of them is live any more."""
        return await self._claim(
            run_id,
            owner,
            lease_s,
            "status = 'awaiting_agents' AND NOT EXISTS (SELECT 1 FROM runs c WHERE "
            "c.parent_id = :run_id AND c.status NOT IN ('completed', 'stopped', 'failed'))",
        )

    async def parents_ready(self, limit: int = 50) -> list[str]:
        """Parents parked for sub-agents that have all ended (a lost notice is caught here)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT p.run_id FROM runs p WHERE p.status = 'awaiting_agents' AND NOT EXISTS "
                    "(SELECT 1 FROM runs c WHERE c.parent_id = p.run_id AND c.status NOT IN "
                    "('completed', 'stopped', 'failed')) LIMIT :limit"
                ),
                {"limit": limit},
            )
            return [r.run_id for r in rows]

    async def children(self, run_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(runs.c.run_id).where(runs.c.parent_id == run_id))
            return [r.run_id for r in rows]

    async def live_children(self, run_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(runs.c.run_id).where(
                    runs.c.parent_id == run_id, runs.c.status.not_in(TERMINAL_STATUSES)
                )
            )
            return [r.run_id for r in rows]

    async def claim_parked_to_stop(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take a parked run (approval or sub-agents) so it can be ended as stopped."""
        return await self._claim(
            run_id, owner, lease_s, "status IN ('awaiting_approval', 'awaiting_agents')"
        )

    async def release(self, run_id: str, owner: str) -> None:
        """Hand a run back (graceful shutdown): another replica may claim it at once."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.lease_owner == owner)
                .values(lease_owner=None, lease_expires_at=None)
            )

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """A run's stored events with `seq` above `after`, oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(journal.c.data)
                .where(journal.c.run_id == run_id, journal.c.kind == "event")
                .order_by(journal.c.seq)
            )
            return [data for (data,) in rows if int(data["seq"]) > after]
