"""The brain's tables (runs, their journal, their inbox) and how a run row maps to a
`RunState` and back. The audit trail's table is `tether_common.audit`'s."""

from __future__ import annotations

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
)
from sqlalchemy.dialects.postgresql import JSONB

from tether_brain.state.options import RunOptions
from tether_brain.state.run import Counters, Limits, RunState
from tether_common.messages.runs import Usage

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
    # The span every segment of the run is a child of (migration 0011): one trace per run.
    Column("trace_parent", String(64)),
    # A typed run's answer as its output schema accepted it (migration 0016).
    Column("output", JSONB),
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


def row_values(state: RunState) -> dict[str, Any]:
    return {
        "status": state.status,
        "stop_reason": state.stop_reason,
        "answer": state.answer,
        "output": state.output,
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


def state_of(row: Any) -> RunState:
    counters = Counters.from_json(row.counters)
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
        output=row.output,
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
        trace_parent=row.trace_parent,
        active_seconds=row.active_seconds,
        options=RunOptions.model_validate(row.options).with_grant(*counters.run_grants),
        counters=counters,
        usage=Usage(
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost=row.cost,
            estimated=bool(row.usage_estimated),
        ),
    )
