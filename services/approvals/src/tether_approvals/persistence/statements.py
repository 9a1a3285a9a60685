"""The statements on the way from an operator's decision to its tool, built once with bound
parameters: deciding a request, spending it, the outbox mark, the notice endpoints of a
tenant, and the one statement that writes the rest of a change (issue 33). Building a
SQLAlchemy statement of this size costs 0.5–1 ms of CPU a time, more than PostgreSQL
takes to run it; one built once is compiled once and its cache key is kept, so each
execution costs only its parameters.

`Prepared` is such a statement with one execution's values; the statements built for
rarer changes (expiry, escalation, a vote) are made per call and go through the same
code (`tether_approvals.decisions.transitions.Transitions.apply`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Update,
    bindparam,
    func,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

from tether_approvals.persistence.store import EVENT_INSERT
from tether_approvals.persistence.tables import approvals, notice_outbox, webhook_endpoints
from tether_approvals.persistence.trail import HEAD_UPSERT, run_trail_sql
from tether_common import audit

__all__ = [
    "DECIDED",
    "ENDPOINTS",
    "SPENT",
    "Prepared",
    "Shape",
    "locked_change",
    "mark_published",
    "writes",
]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A statement built once, with this execution's values."""

    statement: Select[Any]
    params: Mapping[str, Any] = field(default_factory=dict)


def locked_change(change: Update) -> Select[Any]:
    """`change` (an UPDATE of one request) returning its row, with the row's run trail
    locked in the same statement (after the row's own lock: the order every writer takes
    them in) and the transaction's time, which the audit record carries as
    `audit.append` gives it."""
    changed = change.returning(approvals).cte("changed")
    key = audit.lock_key_sql(run_trail_sql(changed.c.run_id))
    lock = func.pg_advisory_xact_lock(key).table_valued().lateral()
    return select(changed, func.now().label("trail_ts")).select_from(changed.join(lock, true()))


def _decided(remembered: bool) -> Select[Any]:
    """The usual operator decision as one conditional UPDATE: a request that is pending,
    not expired, one person's to decide (no quorum, group or escalation) and, for a
    decision that is remembered, not a delete. Parameters: `p_id`, `p_at`, `p_status`,
    `p_note`, `p_by`, `p_decision`."""
    at = bindparam("p_at", type_=approvals.c.decided_at.type)
    plain: list[ColumnElement[bool]] = [
        approvals.c.approval_id == bindparam("p_id", type_=approvals.c.approval_id.type),
        approvals.c.status == "pending",
        approvals.c.expires_at > at,
        approvals.c.needed <= 1,
        approvals.c.group.is_(None),
        approvals.c.escalate_to.is_(None),
        approvals.c.escalate_at.is_(None),
    ]
    if remembered:  # deletes are never remembered
        plain += [func.coalesce(approvals.c[c], "") != "delete" for c in ("scope", "effect")]
    change = (
        update(approvals)
        .where(*plain)
        .values(
            status=bindparam("p_status", type_=approvals.c.status.type),
            note=bindparam("p_note", type_=approvals.c.note.type),
            decided_by=bindparam("p_by", type_=approvals.c.decided_by.type),
            decision=bindparam("p_decision", type_=approvals.c.decision.type),
            decided_at=at,
        )
    )
    return locked_change(change)


# By whether the decision is remembered (allow_run, allow_chat).
DECIDED: dict[bool, Select[Any]] = {
    remembered: _decided(remembered) for remembered in (False, True)
}

# A granted request sealed to this very action becomes consumed. Parameters: `p_id`,
# `p_digest`, `p_at`.
SPENT: Select[Any] = locked_change(
    update(approvals)
    .where(
        approvals.c.approval_id == bindparam("p_id", type_=approvals.c.approval_id.type),
        approvals.c.status == "granted",
        approvals.c.action_digest == bindparam("p_digest", type_=approvals.c.action_digest.type),
    )
    .values(status="consumed", consumed_at=bindparam("p_at", type_=approvals.c.consumed_at.type))
)

# A tenant's webhook endpoints that chose a kind of notice (`p_tenant`, `p_kinds`: a
# one-item list). FOR KEY SHARE (what the outbox rows' foreign key takes anyway, taken
# while reading): an endpoint being deleted is waited for and then skipped, instead of
# failing the change at the insert because its endpoint went in between.
ENDPOINTS: Select[Any] = (
    select(webhook_endpoints.c.endpoint_id, webhook_endpoints.c.agents, webhook_endpoints.c.owners)
    .where(
        webhook_endpoints.c.tenant == bindparam("p_tenant", type_=webhook_endpoints.c.tenant.type),
        webhook_endpoints.c.events.contains(bindparam("p_kinds", type_=JSONB)),
    )
    .with_for_update(read=True, key_share=True)
)


def _marked(flush: bool) -> Update:
    at = bindparam("p_at", type_=approvals.c.published_at.type)
    mine = approvals.c.approval_id == bindparam("p_id", type_=approvals.c.approval_id.type)
    stmt = update(approvals).where(mine)
    if not flush:  # for this transaction only, read by its commit (the row's, 0 or 1)
        stmt = stmt.where(func.set_config("synchronous_commit", "off", True) == "off")
    return stmt.values(published_at=at)


_MARKED = {flush: _marked(flush) for flush in (False, True)}


def mark_published(approval_id: str, at: datetime, *, flush: bool) -> tuple[Update, dict[str, Any]]:
    """The outbox mark (`flush=False`: its commit does not wait for the disk)."""
    return _MARKED[flush], {"p_id": approval_id, "p_at": at}


@dataclass(frozen=True, slots=True)
class Shape:
    """What varies between changes' writes: the columns a seal adds to the row, and how
    many audit records and outbox rows (with which columns) there are."""

    sealed: tuple[str, ...]
    records: tuple[int, tuple[str, ...]]
    told: tuple[int, tuple[str, ...]]


def _rows(table: Table, prefix: str, shape: tuple[int, tuple[str, ...]]) -> Any:
    count, columns = shape
    return table.insert().values(
        [
            {c: bindparam(f"{prefix}{i}_{c}", type_=table.c[c].type) for c in columns}
            for i in range(count)
        ]
    )


@lru_cache(maxsize=64)  # a shape a count of records and of endpoints: a handful in use
def _writes(shape: Shape) -> Select[Any]:
    """Everything a change writes after its UPDATE, as one statement of CTEs: the
    operator event, the seal, the audit records, the trail's head and the outbox rows."""
    parts: list[Any] = [EVENT_INSERT]
    if shape.sealed:
        mine = approvals.c.approval_id == bindparam("s_id", type_=approvals.c.approval_id.type)
        seal = {c: bindparam(f"s_{c}", type_=approvals.c[c].type) for c in shape.sealed}
        parts.append(update(approvals).where(mine).values(seal))
    parts += [_rows(audit.records, "r", shape.records), HEAD_UPSERT]
    if shape.told[0]:
        parts.append(_rows(notice_outbox, "o", shape.told))
    return select(literal(1)).add_cte(*(p.cte(f"write_{i}") for i, p in enumerate(parts)))


def _flat(prefix: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {f"{prefix}{i}_{c}": v for i, row in enumerate(rows) for c, v in row.items()}


def writes(
    event: Mapping[str, Any],
    sealed: Mapping[str, Any],
    approval_id: str,
    records: Sequence[Mapping[str, Any]],
    head: Mapping[str, Any],
    told: Sequence[Mapping[str, Any]],
) -> Prepared:
    """The writes of one change: `event` (`store.event_params`), `sealed` (what the seal
    adds to request `approval_id`), the audit `records`, the trail's `head`
    (`trail.head_params`) and the outbox rows `told` (all with the same columns)."""
    shape = Shape(
        tuple(sorted(sealed)),
        (len(records), tuple(sorted(records[0])) if records else ()),
        (len(told), tuple(sorted(told[0])) if told else ()),
    )
    params = {**event, **head}
    if sealed:
        params |= {"s_id": approval_id} | {f"s_{c}": v for c, v in sealed.items()}
    params |= _flat("r", records) | _flat("o", told)
    return Prepared(_writes(shape), params)
