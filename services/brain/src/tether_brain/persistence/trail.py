"""The brain's audit writer: one hash-chained trail per run (`tether_common.audit`) with its
head kept on the run row (`runs.audit_head`), or in `brain_audit_heads` for trails that
have no run row (an operator's manual tool runs `manual:<id>`, an agent's grant changes
`agent:<id>`); and the data of every event the brain records. Argument values never
enter the trail: names, digests, codes and decisions do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Column, DateTime, MetaData, String, Table, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tether_common import audit
from tether_common.audit import Problem
from tether_common.messages.tools import ToolResult

__all__ = [
    "Problem",
    "approval_decided",
    "approval_requested",
    "decision",
    "denial",
    "grants_changed",
    "head_of",
    "record",
    "tool_call",
    "tool_result",
    "verify_run",
    "waiver_changed",
]


class VerdictFacts(Protocol):
    """What the trail records of a gate verdict (`gates.Verdict` has these fields); a
    protocol so that rows never depend on the gates above them."""

    @property
    def decision(self) -> str: ...
    @property
    def code(self) -> str | None: ...
    @property
    def reach(self) -> str: ...
    @property
    def danger(self) -> str: ...
    @property
    def grant(self) -> str | None: ...
    @property
    def waived(self) -> bool: ...
    @property
    def trail(self) -> tuple[str, ...]: ...


metadata = MetaData()

audit_heads = Table(
    "brain_audit_heads",
    metadata,
    Column("trail", String(200), primary_key=True),
    Column("head", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


async def _keep_head(conn: AsyncConnection, run_id: str, head: str) -> None:
    kept = await conn.execute(
        text("UPDATE runs SET audit_head = :head WHERE run_id = :run_id"),
        {"head": head, "run_id": run_id},
    )
    if kept.rowcount:
        return
    now = datetime.now(UTC)
    stmt = insert(audit_heads).values(trail=run_id, head=head, updated_at=now)
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[audit_heads.c.trail], set_={"head": head, "updated_at": now}
        )
    )


async def record(
    db: AsyncConnection | AsyncEngine,
    run_id: str,
    event: str,
    data: Mapping[str, Any],
    *,
    sink: audit.JsonlSink | None = None,
) -> str:
    """Append one record to `run_id`'s trail and keep its new head, in one transaction:
    the caller's (a connection) or one of its own (an engine). Returns the head.

    With an engine, do not call this while the caller's own open transaction holds the
    run row: the head update would wait for it."""
    if isinstance(db, AsyncEngine):
        async with db.begin() as conn:
            return await record(conn, run_id, event, data, sink=sink)
    head = await audit.append(db, run_id, event, data, sink=sink)
    await _keep_head(db, run_id, head)
    return head


async def head_of(engine: AsyncEngine, run_id: str) -> str | None:
    """The head the trail should end at: the run row's, else the side table's."""
    async with engine.connect() as conn:
        found = (
            await conn.execute(
                text("SELECT audit_head FROM runs WHERE run_id = :run_id"), {"run_id": run_id}
            )
        ).scalar()
        if found is None:
            found = (
                await conn.execute(select(audit_heads.c.head).where(audit_heads.c.trail == run_id))
            ).scalar()
    return None if found is None else str(found)


async def verify_run(engine: AsyncEngine, run_id: str) -> list[Problem]:
    """Every record changed, removed or reordered, and a trail cut after its last record
    (checked against the kept head); an empty list means the trail is intact."""
    return await audit.verify(engine, run_id, await head_of(engine, run_id))


def gate_steps(trail: Sequence[str]) -> list[str]:
    """A verdict's trail as codes (`deny:path_denied`, `ask:not_granted`, `allowed_by:…`):
    the reasons are dropped because they may quote argument values."""
    steps = []
    for line in trail:
        if line.startswith("allowed by "):
            steps.append("allowed_by:" + line.removeprefix("allowed by "))
        else:
            head, _, _ = line.partition(":")
            kind, _, code = head.partition(" (")
            steps.append(f"{kind}:{code.rstrip(')')}")
    return steps


def decision(verdict: VerdictFacts, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """`gate.decision`: what the permission chain decided and through which gates."""
    return {
        "tool": tool,
        "args": audit.redact(args),
        "decision": verdict.decision,
        "code": verdict.code,
        "reach": verdict.reach,
        "danger": verdict.danger,
        "grant": verdict.grant,
        "waived": verdict.waived,
        "steps": gate_steps(verdict.trail),
    }


def denial(tool: str, code: str, *, gate: str) -> dict[str, Any]:
    """`gate.denied`: a call refused at `gate` (validation, permissions, budget, approval)."""
    return {"tool": tool, "code": code, "gate": gate}


def approval_requested(
    approval_id: str,
    tool: str,
    action_digest: str,
    verdict: VerdictFacts,
    changes: str | None = None,
) -> dict[str, Any]:
    """`approval.requested`: the call parked for an operator, and why; for a staged
    effect, the digest of the change set the card shows."""
    data = {
        "approval_id": approval_id,
        "tool": tool,
        "action_digest": action_digest,
        "code": verdict.code,
        "reach": verdict.reach,
        "danger": verdict.danger,
    }
    return data | ({"changes": changes} if changes is not None else {})


def approval_decided(
    approval_id: str,
    decision: str,
    decided_by: str | None,
    *,
    outcome: str | None = None,
    changes: str | None = None,
) -> dict[str, Any]:
    """`approval.decided`: the operator's decision and, once spent, the consume outcome
    (`consumed`, `approval_stale`, `stale_effect`, …), with the digest of the change set
    decided on for a staged effect. The operator's note is not recorded."""
    data = {
        "approval_id": approval_id,
        "decision": decision,
        "decided_by": decided_by,
        "outcome": outcome,
    }
    return data | ({"changes": changes} if changes is not None else {})


def tool_call(call_id: str, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """`tool.call`: a call sent to run (argument names and digests only)."""
    return {"call_id": call_id, "tool": tool, "args": audit.redact(args)}


def tool_result(result: ToolResult) -> dict[str, Any]:
    """`tool.result`: status, error code and size; never the content."""
    return {
        "call_id": result.call_id,
        "tool": result.name,
        "status": "ok" if result.ok else "failed",
        "code": result.error_code,
        "bytes": len(result.content.encode()),
        "output_ref": result.output_ref,
    } | ({"applied": result.applied} if result.applied is not None else {})


def grants_changed(
    agent_id: str, by: str, added: Sequence[str], removed: Sequence[str]
) -> dict[str, Any]:
    """`grants.changed`: entries added to and removed from an agent's grants."""
    return {"agent": agent_id, "by": by, "added": list(added), "removed": list(removed)}


def waiver_changed(
    agent_id: str, by: str, added: Sequence[str], removed: Sequence[str]
) -> dict[str, Any]:
    """`waiver.changed`: `#noapproval` entries added or removed, recorded on their own."""
    return {"agent": agent_id, "by": by, "added": list(added), "removed": list(removed)}
