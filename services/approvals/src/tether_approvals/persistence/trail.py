"""The approvals service's audit trails: one per run (`approvals:<run_id>`) plus `_tokens`,
each with its head kept in `audit_heads` in the same transaction as the record."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, func, select
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_approvals.persistence.tables import audit_heads
from tether_common import audit

_RUN_TRAIL = "approvals:"


def run_trail(run_id: str) -> str:
    return f"{_RUN_TRAIL}{run_id}"


def run_trail_sql(run_id: ColumnElement[str]) -> ColumnElement[str]:
    """`run_trail`, inside a statement that reads the run id off a row."""
    return func.concat(_RUN_TRAIL, run_id)


def _head_upsert() -> Insert:
    row = {c.name: bindparam(f"h_{c.name}", type_=c.type) for c in audit_heads.c}
    stmt = insert(audit_heads).values(row)
    return stmt.on_conflict_do_update(
        index_elements=[audit_heads.c.trail],
        set_={"head": stmt.excluded.head, "updated_at": stmt.excluded.updated_at},
    )


# Keep a head as its trail's (in the transaction of its record); built once, with the
# parameters `head_params` gives (a change writes it inside its one writes statement).
HEAD_UPSERT = _head_upsert()


def head_params(trail: str, head: str, at: datetime) -> dict[str, Any]:
    return {"h_trail": trail, "h_head": head, "h_updated_at": at}


async def record(
    conn: AsyncConnection,
    trail: str,
    event: str,
    data: Mapping[str, Any],
    sink: audit.JsonlSink | None,
) -> str:
    head = await audit.append(conn, trail, event, data, sink=sink)
    await conn.execute(HEAD_UPSERT, head_params(trail, head, datetime.now(UTC)))
    return head


async def head_of(engine: AsyncEngine, trail: str) -> str | None:
    async with engine.connect() as conn:
        found = (
            await conn.execute(select(audit_heads.c.head).where(audit_heads.c.trail == trail))
        ).scalar()
    return None if found is None else str(found)
