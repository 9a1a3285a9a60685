"""The hash-chained audit trail, shared by brain and approvals.

Per trail (a run id, or a named trail such as `_tokens`): records numbered from 0, each
holding its event, its data as canonical JSON, and the digest of the previous record; the
first record holds a random nonce instead, so a trail cannot be forged from scratch. The
caller keeps the head digest `append` returns, so `verify` also finds a trail cut after
its last record. Argument values never enter the trail: pass them through `redact`.

Both services create the table `audit_records` from their own migrations with
`create_table` (idempotent, serialised by an advisory lock), sharing `metadata`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    bindparam,
    cast,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import BIT
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = [
    "JsonlSink",
    "Problem",
    "append",
    "canonical",
    "create_table",
    "last_link",
    "lock_key_sql",
    "metadata",
    "records",
    "redact",
    "verify",
]

metadata = MetaData()

records = Table(
    "audit_records",
    metadata,
    Column("run_id", String(200), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("event", String(100), nullable=False),
    Column("data", Text, nullable=False),
    Column("prev_digest", String(64), nullable=True),
    Column("nonce", String(64), nullable=True),
    Column("ts", DateTime(timezone=True), nullable=False),
    Column("digest", String(64), nullable=False),
    PrimaryKeyConstraint("run_id", "seq", name="pk_audit_records"),
)

# One key for everyone who creates the table, so brain and approvals migrating at the
# same moment cannot both try to create it.
_CREATE_LOCK = 0x7E7A_0A0D


def create_table(conn: Connection) -> None:
    """Create `audit_records` if missing; call from an alembic migration's `upgrade`."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CREATE_LOCK})
    metadata.create_all(conn, checkfirst=True)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def redact(args: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Argument names with the sha256 of each value's canonical JSON; never the values."""
    return {
        name: {"sha256": hashlib.sha256(canonical(value).encode()).hexdigest()}
        for name, value in args.items()
    }


def _digest(
    run_id: str, seq: int, event: str, data: str, prev: str | None, nonce: str | None, ts: datetime
) -> str:
    body = canonical(
        {
            "run_id": run_id,
            "seq": seq,
            "event": event,
            "data": data,
            "prev": prev,
            "nonce": nonce,
            "ts": ts.astimezone(UTC).isoformat(),
        }
    )
    return hashlib.sha256(body.encode()).hexdigest()


class JsonlSink:
    """Also write each record as a JSON line, flushed and fsynced before `append` returns.
    Written inside the caller's transaction, so a rolled-back record may appear in the
    file, but a committed one is never missing from it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _write(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    async def write(self, record: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._write, canonical(dict(record)))


def _lock_key(run_id: str) -> int:
    return int.from_bytes(
        hashlib.sha256(b"audit:" + run_id.encode()).digest()[:8], "big", signed=True
    )


def lock_key_sql(trail: ColumnElement[str]) -> ColumnElement[int]:
    """The same key as `_lock_key`, computed by PostgreSQL from a trail known only inside
    a statement (a row it changes), so that statement can take the trail's lock too."""
    digest = func.sha256(func.convert_to(func.concat("audit:", trail), "UTF8"))
    first_8_bytes = func.substr(func.encode(digest, "hex"), 1, 16)
    return cast(cast(func.concat("x", first_8_bytes), BIT(64)), BigInteger)


# Built once (a decision reads it on its way to the tool; building costs more than running).
_LAST_LINK = (
    select(records.c.seq, records.c.digest)
    .where(records.c.run_id == bindparam("p_trail", type_=records.c.run_id.type))
    .order_by(records.c.seq.desc())
    .limit(1)
)


async def last_link(conn: AsyncConnection, run_id: str) -> tuple[int, str | None]:
    """The next record's number and the digest it links to (None: the trail is empty).
    Read it only under the trail's lock, in a statement after the one that took it (a
    statement sees what was committed when it started)."""
    last = (await conn.execute(_LAST_LINK, {"p_trail": run_id})).first()
    return (0, None) if last is None else (last.seq + 1, str(last.digest))


async def _append(
    conn: AsyncConnection, run_id: str, event: str, data: Mapping[str, Any]
) -> dict[str, Any]:
    # Serialises appends per trail for this transaction; other trails go on in parallel.
    # The record's time is read with it: `now()` is the transaction's start, the same in
    # every statement of it, so it costs no round trip of its own.
    locked = text("SELECT now() FROM pg_advisory_xact_lock(:k)")
    ts = (await conn.execute(locked, {"k": _lock_key(run_id)})).scalar_one()
    seq, prev = await last_link(conn, run_id)
    nonce = secrets.token_hex(16) if seq == 0 else None
    body = canonical(dict(data))
    row = {"run_id": run_id, "seq": seq, "event": event, "data": body, "prev_digest": prev}
    row |= {"nonce": nonce, "ts": ts, "digest": _digest(run_id, seq, event, body, prev, nonce, ts)}
    await conn.execute(records.insert().values(row))
    return row


def chain(
    run_id: str,
    next_seq: int,
    prev: str | None,
    items: Sequence[tuple[str, Mapping[str, Any]]],
    ts: datetime | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The rows that continue a trail from (`next_seq`, `prev`), and its new head. For a
    writer that already knows its trail's head (the brain, holding the run's lease)."""
    ts = ts or datetime.now(UTC)
    rows = []
    for event, data in items:
        nonce = secrets.token_hex(16) if next_seq == 0 else None
        body = canonical(dict(data))
        digest = _digest(run_id, next_seq, event, body, prev, nonce, ts)
        rows.append(
            {"run_id": run_id, "seq": next_seq, "event": event, "data": body, "prev_digest": prev}
            | {"nonce": nonce, "ts": ts, "digest": digest}
        )
        next_seq, prev = next_seq + 1, digest
    return rows, prev


async def append_many(
    conn: AsyncConnection, run_id: str, items: Sequence[tuple[str, Mapping[str, Any]]]
) -> str | None:
    """Append several records to one trail in the caller's transaction with one lock, one
    read of the head and one insert; returns the new head."""
    if not items:
        return None
    await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(run_id)})
    start, prev = await last_link(conn, run_id)
    rows, head = chain(run_id, start, prev, items)
    await conn.execute(records.insert(), rows)
    return head


async def append(
    db: AsyncConnection | AsyncEngine,
    run_id: str,
    event: str,
    data: Mapping[str, Any],
    *,
    sink: JsonlSink | None = None,
) -> str:
    """Append one record and return the trail's new head digest. With a connection the
    record joins the caller's transaction; with an engine it commits on its own."""
    if isinstance(db, AsyncEngine):
        async with db.begin() as conn:
            row = await _append(conn, run_id, event, data)
    else:
        row = await _append(db, run_id, event, data)
    if sink is not None:
        await sink.write(row | {"ts": row["ts"].astimezone(UTC).isoformat()})
    return str(row["digest"])


ProblemKind = Literal["changed", "removed", "reordered", "broken_link", "no_nonce", "cut"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a trail; `seq` is the record where it shows (None: the trail)."""

    kind: ProblemKind
    seq: int | None
    detail: str


def _check_record(row: Any, position: int, prev: str | None, known: set[str]) -> list[Problem]:
    problems: list[Problem] = []
    if row.seq != position:
        problems.append(Problem("removed", row.seq, f"record {row.seq} is at position {position}"))
    expected = _digest(row.run_id, row.seq, row.event, row.data, row.prev_digest, row.nonce, row.ts)
    if expected != row.digest:
        problems.append(Problem("changed", row.seq, "the record does not match its digest"))
    if row.prev_digest != prev:
        # A link to another record of this trail means records were moved around.
        kind: ProblemKind = "reordered" if row.prev_digest in known else "broken_link"
        problems.append(Problem(kind, row.seq, "the previous digest does not match"))
    if position == 0 and not row.nonce:
        problems.append(Problem("no_nonce", row.seq, "the first record holds no nonce"))
    return problems


async def verify(engine: AsyncEngine, run_id: str, expected_head: str | None) -> list[Problem]:
    """Every problem found in `run_id`'s trail; an empty list means it is intact.
    `expected_head` is the head digest the run kept (None: the trail should be empty)."""
    async with engine.connect() as conn:
        rows = list(
            await conn.execute(
                select(records).where(records.c.run_id == run_id).order_by(records.c.seq)
            )
        )
    known = {str(row.digest) for row in rows}
    problems: list[Problem] = []
    prev: str | None = None
    for position, row in enumerate(rows):
        problems += _check_record(row, position, prev, known)
        prev = row.digest
    if prev != expected_head:
        detail = f"the trail ends at {prev!r}, the run's head is {expected_head!r}"
        problems.append(Problem("cut", len(rows), detail))
    return problems
