"""A run's recorded calls, rebuilt from its audit records and its journal: each
`gate.decision` joined to the journal call whose argument digests it holds, with what the
gates decided, what happened next (an approval and who decided it), and the run state
the gates read then.

The state is rebuilt as the loop keeps it: the run is tainted from the first result of a
tool whose output is not trusted (`loop.planned.taints`, the loop's own rule), or where a
decision's own gates asked because of taint (`ask:untrusted_content`: a sub-agent's taint
comes back to its parent without a result record of its own); a tool is remembered for
the run (`session`) once an `allow_run`/`allow_chat` approval of it was spent (never a
delete). The gate decision a resumed run makes again for the approved call, and one made
again after a takeover, are the same call and are not counted twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tether_brain.gates.policy import Decision
from tether_brain.loop.planned import taints
from tether_brain.policy.history import AuditRow, RunHistory
from tether_brain.state.options import RunOptions
from tether_common import audit
from tether_common.messages.gateway import CallRecord
from tether_common.messages.policy_replay import Outcome
from tether_common.messages.tools import ToolDescriptor

__all__ = ["Describe", "RecordedCall", "link"]

Describe = Callable[[str], ToolDescriptor | None]  # a tool by name or alias (`Toolbox`)
TAINT_STEP = "ask:untrusted_content"
_DECIDED: dict[str, Outcome] = {"deny": "denied", "expired": "expired"}
_GATED: dict[str, Outcome] = {"allow": "ran", "deny": "refused"}  # an ask waits: `deferred`
_DECISIONS: dict[str, Decision] = {"allow": "allow", "ask": "ask", "deny": "deny"}
REMEMBERED = frozenset({"allow_run", "allow_chat"})


@dataclass(slots=True)
class RecordedCall:
    """One call as recorded; `decision` is what the gates said (before any approval)."""

    run_id: str
    call: CallRecord
    tool: ToolDescriptor
    at: datetime
    decision: Decision
    code: str | None
    outcome: Outcome
    options: RunOptions
    tainted: bool
    session: frozenset[str]
    decided_by: str | None = None

    @property
    def wanted(self) -> bool:
        """Allowed by the gates or approved by a person: a suggestion must allow it."""
        return self.outcome in ("ran", "approved")

    @property
    def refused(self) -> bool:
        """Denied by the gates or a person, or left to expire: no grant may cover it."""
        return self.outcome in ("refused", "denied", "expired")


def _same(record: AuditRow, call: CallRecord, describe: Describe) -> bool:
    found = describe(call.name)
    name = found.name if found is not None else call.name
    return name == record.data.get("tool") and audit.redact(call.arguments) == record.data.get(
        "args"
    )


@dataclass(slots=True)
class _Walk:
    """One run's records read in order, with the state the loop kept at each point."""

    run: RunHistory
    since: datetime
    describe: Describe
    skipped: Counter[str]
    linked: list[RecordedCall]
    next_call: int = 0
    tainted: bool = False
    session: frozenset[str] = frozenset()
    # The asks of the latest planning (one step's decisions are consecutive records): a
    # step parks its first ask; the others are deferred.
    asks: list[RecordedCall] = field(default_factory=list)
    awaiting: RecordedCall | None = None  # the call parked on an approval
    previous: str = ""  # the event of the record read before

    def decision(self, record: AuditRow) -> None:
        if self.previous != "gate.decision":
            self.asks = []
        if self.awaiting is not None and _same(record, self.awaiting.call, self.describe):
            return  # the resumed run's gates, run again for the approved call
        calls = self.run.calls
        index = next(
            (
                i
                for i in range(self.next_call, len(calls))
                if _same(record, calls[i], self.describe)
            ),
            None,
        )
        if index is None:
            if not any(_same(record, c.call, self.describe) for c in self.linked):
                self.skipped["unmatched"] += 1  # else: sent again after a takeover
            return
        self.next_call = index + 1
        tool = self.describe(str(record.data["tool"]))
        decision = _DECISIONS.get(str(record.data.get("decision")))
        if tool is None or decision is None:
            self.skipped["unknown_tool" if tool is None else "unreadable"] += 1
            return
        self.tainted = self.tainted or TAINT_STEP in record.data.get("steps", [])
        item = self._item(record, calls[index], tool, decision)
        if record.ts >= self.since:
            self.linked.append(item)
        if item.decision == "ask":
            self.asks.append(item)

    def _item(
        self, record: AuditRow, call: CallRecord, tool: ToolDescriptor, decision: Decision
    ) -> RecordedCall:
        return RecordedCall(
            run_id=self.run.run_id,
            call=call,
            tool=tool,
            at=record.ts,
            decision=decision,
            code=record.data.get("code"),
            outcome=_GATED.get(decision, "deferred"),
            options=self.run.options,
            tainted=self.tainted,
            session=self.session,
        )

    def requested(self, record: AuditRow) -> None:
        parked = next((c for c in self.asks if c.tool.name == record.data.get("tool")), None)
        if parked is not None:
            parked.outcome = "pending"
            self.awaiting, self.asks = parked, []

    def decided(self, record: AuditRow) -> None:
        item, self.awaiting = self.awaiting, None
        if item is None:
            return
        decision = str(record.data.get("decision"))
        item.decided_by = record.data.get("decided_by")
        if decision in _DECIDED:
            item.outcome = _DECIDED[decision]
            return
        spent = record.data.get("outcome") == "consumed"
        item.outcome = "approved" if spent else "stale"
        if spent and decision in REMEMBERED and item.tool.scope != "delete":
            self.session = self.session | {item.tool.name}

    def result(self, record: AuditRow) -> None:
        tool = self.describe(str(record.data.get("tool")))
        if tool is None or taints(tool):  # a tool nobody declares trusted taints
            self.tainted = True


def link(
    run: RunHistory, since: datetime, describe: Describe, skipped: Counter[str]
) -> list[RecordedCall]:
    """The run's calls decided at or after `since`, in order; what cannot be linked is
    counted in `skipped` by reason."""
    walk = _Walk(run, since, describe, skipped, [], session=frozenset(run.options.session_grants))
    handlers: dict[str, Callable[[AuditRow], Any]] = {
        "gate.decision": walk.decision,
        "approval.requested": walk.requested,
        "approval.decided": walk.decided,
        "tool.result": walk.result,
    }
    for record in run.records:
        handlers[record.event](record)
        walk.previous = record.event
    return walk.linked
