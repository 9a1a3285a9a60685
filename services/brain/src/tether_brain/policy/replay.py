"""Policy what-if: every recorded call of an agent in a window decided again under a
proposed policy, by the loop's own permission chain (`gates.decide`, with the policy
`Agents.policy` builds for the run's options from the proposal), and the decisions that
would change counted by transition (`allow->ask`, `ask->allow`, `deny->allow`, …) and by
tool.

`before` is the decision the gates recorded then (before any approval); `after` the one
the proposal gives with the run's state as it was (taint, remembered grants, the run's
own mode). Validation and budgets are not policy and are not replayed: a call refused by
them has no decision to compare."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.config import AgentConfig, Agents
from tether_brain.gates import Verdict, decide
from tether_brain.gates.policy import Rule
from tether_brain.policy.history import read_history
from tether_brain.policy.linking import Describe, RecordedCall, link
from tether_common.excerpt import cut
from tether_common.messages.policy_replay import ChangedCall, ReplayReport

__all__ = ["Proposal", "Recorded", "changed_call", "recorded", "redecide", "replay"]


@dataclass(frozen=True, slots=True)
class Proposal:
    """An agent's definition to judge; `guardrails` None: the organisation's in force."""

    config: AgentConfig
    guardrails: Mapping[str, Rule] | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """The window's calls, oldest first, and what could not be read."""

    agent: str
    since: datetime
    until: datetime
    runs: int
    calls: list[RecordedCall]
    skipped: Counter[str] = field(default_factory=Counter)
    complete: bool = True
    next_since: datetime | None = None


async def recorded(
    engine: AsyncEngine,
    agent: str,
    since: datetime,
    until: datetime,
    describe: Describe,
    *,
    tenant: str | None,
) -> Recorded:
    """The agent's calls in the window, in runs of `tenant` (None: every tenant's)."""
    history = await read_history(engine, agent, since, until, tenant=tenant)
    skipped: Counter[str] = Counter()
    calls = [c for run in history.runs for c in link(run, since, describe, skipped)]
    calls.sort(key=lambda c: c.at)
    return Recorded(
        agent,
        since,
        until,
        len(history.runs),
        calls,
        skipped,
        history.complete,
        history.next_since,
    )


def redecide(agents: Agents, item: RecordedCall, proposal: Proposal) -> Verdict:
    """The gates' verdict on a recorded call under `proposal`, in the run's state then."""
    # The history is of the agent's tenant's runs (`api/policy_replay.py`).
    policy = agents.policy(
        item.options, proposal.config.tenant, proposal.config, proposal.guardrails
    )
    return decide(
        item.tool, item.call.arguments, policy, tainted=item.tainted, session=item.session
    )


def changed_call(item: RecordedCall, verdict: Verdict) -> ChangedCall:
    return ChangedCall(
        run_id=item.run_id,
        call_id=item.call.id,
        at=item.at,
        tool=item.tool.name,
        arguments=cut(item.call.arguments),
        before=item.decision,
        after=verdict.decision,
        outcome=item.outcome,
        decided_by=item.decided_by,
        code=verdict.code,
        reason=verdict.reason,
        quorum=None if verdict.quorum is None else verdict.quorum.needed,
    )


def replay(
    agents: Agents,
    proposal: Proposal,
    found: Recorded,
    *,
    limit: int,
    only_changed: bool = True,
) -> ReplayReport:
    transitions: Counter[str] = Counter()
    by_tool: defaultdict[str, Counter[str]] = defaultdict(Counter)
    listed: list[ChangedCall] = []
    truncated = False
    for item in found.calls:
        verdict = redecide(agents, item, proposal)
        changed = verdict.decision != item.decision
        if changed:
            transition = f"{item.decision}->{verdict.decision}"
            transitions[transition] += 1
            by_tool[item.tool.name][transition] += 1
        if changed or not only_changed:
            if len(listed) < limit:
                listed.append(changed_call(item, verdict))
            else:
                truncated = True
    return ReplayReport(
        agent=found.agent,
        since=found.since,
        until=found.until,
        runs=found.runs,
        calls=len(found.calls),
        changed=sum(transitions.values()),
        transitions=dict(transitions),
        by_tool={tool: dict(counts) for tool, counts in sorted(by_tool.items())},
        changes=listed,
        truncated=truncated,
        complete=found.complete,
        next_since=found.next_since,
        skipped=dict(found.skipped),
    )
