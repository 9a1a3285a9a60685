"""Durable runs kept in memory, written as `persistence.store.RunStore` writes them: a row
built by the same code (`tables.row_values`, `commits.step_write`), fenced the same way,
journaled with the same numbering, and read back by the same code (`tables.state_of`,
`RunState.replay`), so a run loaded from here is what PostgreSQL would give back. The
contract suite (tests/brain/contract) holds both stores to the same cases."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from tether_brain.persistence.commits import step_write
from tether_brain.persistence.tables import row_values, state_of
from tether_brain.state.clock import SYSTEM_CLOCK, Clock
from tether_brain.state.run import EntryKind, RunState
from tether_common.errors import ConflictError, ErrorCode, NotFoundError
from tether_common.messages.runs import TERMINAL_STATUSES


@dataclass(slots=True)
class _Run:
    row: dict[str, Any]
    journal: list[tuple[int, EntryKind, str]] = field(default_factory=list)  # seq, kind, JSON
    inbox: list[tuple[str, bool]] = field(default_factory=list)  # text, delivered
    audit: list[dict[str, Any]] = field(default_factory=list)


class MemoryQueries:
    def __init__(self, runs: dict[str, _Run]) -> None:
        self._runs = runs

    async def status(self, run_id: str) -> tuple[str, bool]:
        row = _found(self._runs, run_id).row
        return str(row["status"]), bool(row["stop_requested"])


class MemoryStore:
    """On the `persistence.store.StorePort` protocol. Leases run on `clock`."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.runs: dict[str, _Run] = {}
        self._queries = MemoryQueries(self.runs)

    @property
    def queries(self) -> MemoryQueries:
        return self._queries

    async def create(self, state: RunState, *, owner: str, lease_s: float) -> None:
        if state.run_id in self.runs:
            raise ConflictError(f"run {state.run_id} exists")
        limits = {k: v for k, v in asdict(state.limits).items() if k != "max_steps"}
        options = json.loads(json.dumps(state.options.stored()))  # as JSONB gives it back
        self.runs[state.run_id] = _Run(
            row_values(state)
            | {
                "run_id": state.run_id,
                "prompt": state.prompt,
                "provider": state.provider,
                "model": state.model,
                "max_steps": state.max_steps,
                "fence": state.fence,
                "options": options,
                "limits": limits,
                "created_at": state.created_at,
                "parent_id": state.parent_id,
                "depth": state.depth,
                "tenant": state.tenant,
                "owner": state.owner,
                "trace_parent": state.trace_parent,
                "takeovers": 0,
                "stop_requested": False,
                "audit_head": None,
                "lease_owner": owner,
                "lease_expires_at": self.clock.monotonic() + lease_s,
            }
        )

    async def commit(self, state: RunState) -> None:
        """As `COMMIT_STEP`: only while the fence is ours and the lease runs; a run that
        leaves the live states gives its lease up."""
        run = self.runs.get(state.run_id)
        write = step_write(state)
        params = write.params
        if run is None or not self._held(run, state.fence):
            raise ConflictError(
                f"run {state.run_id} is no longer ours (fence {state.fence}, or its lease ran out)"
            )
        for name in run.row.keys() & params.keys() - {"run_id", "fence"}:
            run.row[name] = params[name]
        run.row["counters"] = json.loads(params["counters"])
        if params["output"] is not None:  # jsonb, as PostgreSQL gives it back
            run.row["output"] = json.loads(params["output"])
        if params["release"]:
            run.row["lease_owner"] = run.row["lease_expires_at"] = None
        run.journal += zip(params["j_seq"], params["j_kind"], params["j_data"], strict=True)
        columns = [n[2:] for n in params if n.startswith("a_")]
        rows = zip(*(params[f"a_{c}"] for c in columns), strict=True)
        run.audit += [dict(zip(columns, values, strict=True)) for values in rows]
        write.applied(state)

    def _held(self, run: _Run, fence: int) -> bool:
        expires = run.row["lease_expires_at"]
        return (
            run.row["fence"] == fence and expires is not None and expires > self.clock.monotonic()
        )

    async def finish_unless_queued(
        self, state: RunState, finishing: Callable[[], None]
    ) -> list[str]:
        run = _found(self.runs, state.run_id)
        queued = [text for text, delivered in run.inbox if not delivered]
        if queued:
            run.inbox = [(text, True) for text, _ in run.inbox]
            return queued
        finishing()
        await self.commit(state)
        return []

    async def queue_message(self, run_id: str, message: str) -> str:
        row = _found(self.runs, run_id).row
        if row["status"] in TERMINAL_STATUSES:
            raise ConflictError(
                f"run {run_id} has ended ({row['status']})", code=ErrorCode.RUN_ENDED
            )
        self.runs[run_id].inbox.append((message, False))
        return str(row["status"])

    async def load(self, run_id: str) -> RunState:
        run = _found(self.runs, run_id)
        state = state_of(SimpleNamespace(**run.row))
        for _, kind, data in run.journal:
            if kind != "event":
                state.replay(kind, json.loads(data))
        return state

    async def request_stop(self, run_id: str) -> str:
        row = _found(self.runs, run_id).row
        row["stop_requested"] = True
        return str(row["status"])

    def journal(self, run_id: str) -> list[tuple[int, EntryKind, str]]:
        """The run's journal entries (seq, kind, JSON text), in order."""
        return list(_found(self.runs, run_id).journal)


def _found(runs: dict[str, _Run], run_id: str) -> _Run:
    run = runs.get(run_id)
    if run is None:
        raise NotFoundError(f"no run '{run_id}'")
    return run
