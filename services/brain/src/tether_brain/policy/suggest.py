"""Least-privilege suggestions: from an agent's recorded window, the narrowest grants
(`narrowing.py` says how) that would have allowed every call that was allowed or
approved and granted none that was denied, as a diff against the grants in force. Never
applied: an operator reads it and applies it (`tether agents apply`).

A tool gets entries only if some wanted call of it needed a grant: under the agent's
current policy with no grants and nothing remembered, the gates ask `not_granted` or
`grant_constraint_violated`. Tools that scope, mode or the allow-list allow need none.
Waivers (`#noapproval`) are never suggested: an operator adds one deliberately.

The answer is checked by replaying it (`replay.redecide`, the gates' own code): every
wanted call must pass the grants (no grant ask, no denial), and no refused call may be
allowed by one of the suggested entries; `problems` lists any that do not."""

from __future__ import annotations

from collections import defaultdict

from tether_brain.agents.config import AgentConfig, Agents
from tether_brain.gates import Verdict, decide
from tether_brain.gates.grants import Grant, parse_grant
from tether_brain.policy.linking import RecordedCall
from tether_brain.policy.narrowing import narrowest
from tether_brain.policy.replay import Proposal, Recorded, redecide
from tether_common.messages.policy_replay import Narrowed, Suggestion, Uncovered

__all__ = ["GRANT_ASKS", "suggest"]

GRANT_ASKS = ("ask (not_granted)", "ask (grant_constraint_violated)")


def grant_asks(verdict: Verdict) -> bool:
    """Did the grants stop this call (a grant ask, or a denial)?"""
    return verdict.decision == "deny" or any(line.startswith(GRANT_ASKS) for line in verdict.trail)


def _within(narrow: Grant, wide: Grant) -> bool:
    """Every call `narrow` allows, `wide` allows too (for the tool `narrow` names)."""
    if not wide.covers(narrow.tool):
        return False
    mine = {c.key: c.allowed for c in narrow.constraints}
    return all(c.key in mine and mine[c.key] <= c.allowed for c in wide.constraints)


def _parsed(raw: str) -> Grant | None:
    try:
        return parse_grant(raw)
    except ValueError:
        return None


def _diff(found: Suggestion, by_tool: dict[str, list[str]]) -> None:
    """`added`, `removed`, `narrowed`, `kept`: the suggestion against `current`."""
    current, suggested = found.current, found.grants
    found.kept = [g for g in suggested if g in current]
    narrowed_to: set[str] = set()
    for raw in current:
        wide = _parsed(raw)
        if raw in suggested:
            continue
        new = [s for tool, ss in by_tool.items() if wide and wide.covers(tool) for s in ss]
        new = [s for s in new if s not in current]
        if wide is not None and new and all(_within(parse_grant(s), wide) for s in new):
            found.narrowed.append(Narrowed(entry=raw, to=new))
            narrowed_to.update(new)
        else:
            found.removed.append(raw)
    found.added = [g for g in suggested if g not in current and g not in narrowed_to]


def _needs_grant(agents: Agents, bare: Proposal, item: RecordedCall) -> bool:
    """The same chain with nothing granted and nothing remembered: do grants decide it?"""
    policy = agents.policy(item.options, bare.config.tenant, bare.config, bare.guardrails)
    verdict = decide(item.tool, item.call.arguments, policy, tainted=item.tainted)
    return grant_asks(verdict)


def _verify(agents: Agents, config: AgentConfig, found: Suggestion, calls: Recorded) -> None:
    proposal = Proposal(config.model_copy(update={"grants": found.grants}))
    skip = {(u.run_id, u.call_id) for u in found.uncovered}
    for item in calls.calls:
        if (item.run_id, item.call.id) in skip or not (item.wanted or item.refused):
            continue
        verdict = redecide(agents, item, proposal)
        where = f"{item.tool.name} call {item.call.id} of {item.run_id}"
        if item.wanted and grant_asks(verdict):
            found.problems.append(f"{where} was {item.outcome} but would not pass the grants")
        if item.refused and verdict.grant is not None and verdict.grant in found.grants:
            found.problems.append(f"{where} was {item.outcome} but {verdict.grant} allows it")
    found.verified = not found.problems


def suggest(agents: Agents, config: AgentConfig, calls: Recorded) -> Suggestion:
    """The suggestion for `calls` against the agent's `config` in force."""
    bare = Proposal(config.model_copy(update={"grants": []}))
    wanted: defaultdict[str, list[RecordedCall]] = defaultdict(list)
    refused: defaultdict[str, list[RecordedCall]] = defaultdict(list)
    for item in calls.calls:
        if item.refused:
            refused[item.tool.name].append(item)
        elif item.wanted:
            wanted[item.tool.name].append(item)
    found = Suggestion(
        agent=calls.agent,
        since=calls.since,
        until=calls.until,
        calls=len(calls.calls),
        wanted=sum(map(len, wanted.values())),
        refused=sum(map(len, refused.values())),
        current=list(config.grants),
        grants=[],
        complete=calls.complete,
    )
    by_tool: dict[str, list[str]] = {}
    for tool, items in sorted(wanted.items()):
        if not any(_needs_grant(agents, bare, item) for item in items):
            continue
        denied = [r.call.arguments for r in refused.get(tool, [])]
        entries = narrowest(tool, [i.call.arguments for i in items], denied)
        by_tool[tool] = entries.entries
        found.grants += entries.entries
        found.uncovered += [
            Uncovered(
                run_id=items[i].run_id,
                call_id=items[i].call.id,
                tool=tool,
                why="a denied call has the same constrainable arguments",
            )
            for i in entries.uncovered
        ]
    _diff(found, by_tool)
    _verify(agents, config, found, calls)
    return found
