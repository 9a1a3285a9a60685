"""The permission chain for one call, as a pure function of the tool, its arguments, the
agent's policy and the run's state: organisation guardrails → categories and mode → the
agent's quorums (an ask for several people) → hard denials → the shell danger classifier →
grants and scope → the untrusted-content bar.
Deny beats ask beats allow; the trail says why, for `POST /v1/policy/explain`.

`guardrail` and `standing_denial` are the one place that reads the organisation's rules:
the chain, the tool catalogue and manual runs all ask them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from tether_brain.gates.grants import Grant, GrantSet
from tether_brain.gates.quorum import quorum_for
from tether_common.errors import ErrorCode, SafetyError
from tether_common.messages.agents import CATEGORIES as CATEGORIES
from tether_common.messages.agents import Category as Category
from tether_common.messages.approvals import QuorumRule
from tether_common.messages.runs import PermissionMode
from tether_common.messages.tools import ToolDescriptor
from tether_common.safety import check as check_url
from tether_common.safety import classify, resolve

Decision = Literal["allow", "ask", "deny"]
Rule = Literal["confirm", "deny"]
RULE_RANK: Mapping[str, int] = {"confirm": 1, "deny": 2}
REACH_RANK = {"self": 0, "user": 1, "instance": 2, "external": 3}
RISKY_EFFECTS = frozenset({"process", "write", "network", "admin", "mcp", "unclassified"})
ALL_CATEGORIES: frozenset[str] = frozenset(CATEGORIES)


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    agent_id: str
    grants: GrantSet
    workspace: Path
    owner: str | None = None
    mode: PermissionMode = "allow-reads"
    categories: frozenset[str] = ALL_CATEGORIES
    guardrails: Mapping[str, Rule] = field(default_factory=dict)
    allowlist: tuple[Grant, ...] = ()
    untrusted_bar: bool = True
    waiver_lifts_taint: bool = False
    # Two keys: tool pattern or `category:<name>` -> the quorum it needs (gates/quorum.py).
    quorums: Mapping[str, QuorumRule] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    code: str | None
    reason: str
    reach: str
    danger: str = "none"
    grant: str | None = None
    waived: bool = False
    trail: tuple[str, ...] = ()
    # An `ask` that the agent's policy wants decided by several people (None: one).
    quorum: QuorumRule | None = None
    # Every gate that asks (codes, in chain order; `code` is the first): an operator's
    # approval answers exactly these, so a gate that asks later is not answered by it.
    asks: tuple[str, ...] = ()


@dataclass(slots=True)
class _Chain:
    tool: ToolDescriptor
    trail: list[str] = field(default_factory=list)
    asks: list[tuple[str, str]] = field(default_factory=list)
    danger: str = "none"

    def deny(self, code: str, reason: str) -> Verdict:
        self.trail.append(f"deny ({code}): {reason}")
        return Verdict("deny", code, reason, self.tool.reach, self.danger, trail=tuple(self.trail))

    def ask(self, code: str, reason: str) -> None:
        self.trail.append(f"ask ({code}): {reason}")
        self.asks.append((code, reason))


@dataclass(frozen=True, slots=True)
class Guardrail:
    """The organisation's rule for one tool, and the pattern that set it."""

    rule: Rule
    pattern: str


def guardrail(tool: ToolDescriptor, guardrails: Mapping[str, Rule]) -> Guardrail | None:
    """The strongest rule among every pattern that matches the tool: deny wins over
    confirm whatever order the patterns come in. A pattern (a glob: `*`, `?`, `[...]`)
    is tried against the tool's name and each of its aliases, case-insensitively, since
    the model may call a tool by any of them: a rule written for one name holds for all."""
    names = [n.casefold() for n in (tool.name, *tool.aliases)]
    found: Guardrail | None = None
    for pattern, rule in guardrails.items():
        if rule not in RULE_RANK:  # settings validate the values; never treat junk as allow
            rule = "deny"
        if not any(fnmatchcase(name, pattern.casefold()) for name in names):
            continue
        if found is None or RULE_RANK[rule] > RULE_RANK[found.rule]:
            found = Guardrail(rule, pattern)
    return found


def standing_denial(tool: ToolDescriptor, policy: AgentPolicy) -> tuple[str, str] | None:
    """What refuses the tool whatever its arguments (the catalogue shows it as `blocked`):
    an organisation deny, a tool-less agent, a category switched off, a read-only mode."""
    rule = guardrail(tool, policy.guardrails)
    if rule is not None and rule.rule == "deny":
        return "org_denied", f"the organisation denies {tool.name} (rule '{rule.pattern}')"
    if policy.grants.tool_less:
        return "not_granted", f"agent {policy.agent_id} is deliberately tool-less"
    if (cat := category(tool)) not in policy.categories:
        return "category_off", f"the {cat} category is switched off"
    if policy.mode == "read-only" and tool.scope != "read":
        return "mode_read_only", f"{tool.name} changes things; the mode is read-only"
    return None


def category(tool: ToolDescriptor) -> Category:
    if tool.effect == "process":
        return "shell"
    if tool.effect == "network":
        return "network"
    if tool.name.startswith("file_"):
        return "read_files" if tool.scope == "read" else "write_files"
    return "write_files" if tool.effect == "write" else "other"


def _no_dns(host: str) -> list[str]:
    """The brain judges literals and names only; the runner resolves at connect time."""
    raise LookupError(host)


def hard_denial(
    tool: ToolDescriptor, args: Mapping[str, Any], workspace: Path
) -> tuple[str, str] | None:
    """Paths outside the workspace or protected, deny-listed commands, blocked URLs."""
    try:
        for key in ("path", "directory", "file"):
            if isinstance(args.get(key), str):
                resolve(workspace, args[key], write=tool.scope != "read")
        if isinstance(args.get("url"), str):
            check_url(args["url"], resolver=_no_dns)
    except SafetyError as exc:
        if (
            exc.code != ErrorCode.DNS_FAILED
        ):  # a name the brain does not resolve: the runner decides
            return exc.code, exc.message
    if tool.effect == "process" and isinstance(args.get("command"), str):
        verdict = classify(args["command"])
        if verdict.decision == "deny":
            return "deny_listed", "; ".join(verdict.reasons)
    return None


def _shell_asks(chain: _Chain, tool: ToolDescriptor, args: Mapping[str, Any]) -> None:
    if tool.effect != "process" or not isinstance(args.get("command"), str):
        return
    verdict = classify(args["command"])
    chain.danger = verdict.danger.name.lower()
    if verdict.decision == "ask":
        chain.ask("shell_" + ("opaque" if verdict.opaque else "danger"), "; ".join(verdict.reasons))


def needs_grant(tool: ToolDescriptor) -> bool:
    return tool.scope != "read" or REACH_RANK.get(tool.reach, 3) >= REACH_RANK["instance"]


# What a tool does and how far it reaches, in words an operator reads on a card or in
# `tether policy explain` (the codes stay in the trail).
SCOPE_WORDS: Mapping[str, str] = {
    "read": "only reads",
    "create": "creates things",
    "update": "changes things",
    "delete": "deletes things",
}
REACH_WORDS: Mapping[str, str] = {
    "self": "within this run",
    "user": "within the user's workspace",
    "instance": "across this Tether instance",
    "external": "outside Tether",
}


def described(tool: ToolDescriptor) -> str:
    """`file_write changes things (scope update) within the user's workspace (reach user)`."""
    does = SCOPE_WORDS.get(tool.scope, tool.scope)
    where = REACH_WORDS.get(tool.reach, REACH_WORDS["external"])
    return f"{tool.name} {does} (scope {tool.scope}) {where} (reach {tool.reach})"


def _why_not_granted(tool: ToolDescriptor, policy: AgentPolicy) -> str:
    needs = "anything but a read" if tool.scope != "read" else "a read that reaches this far"
    return (
        f"{described(tool)}: {needs} needs a grant, and agent {policy.agent_id} has none for "
        f"it, so an operator approves each call (a grant '{tool.name}' would allow it)"
    )


def _why_allowed(
    tool: ToolDescriptor, policy: AgentPolicy, grant: Grant | None, other: str | None
) -> str:
    """The plain reason an allowed call runs (the trail keeps the rule that allowed it):
    `other` is None for an agent's grant, else what `_granted` says allowed it."""
    waived = " without confirmation (#noapproval)" if grant and grant.noapproval else ""
    if other is None and grant is not None:
        return f"agent {policy.agent_id}'s grant '{grant.raw}' allows it{waived}"
    if not needs_grant(tool):
        return f"{described(tool)}, which needs no grant: it runs without asking"
    if grant is not None:
        return f"the project allowlist's entry '{grant.raw}' allows it{waived}"
    return f"allowed by {other}"


def _granted(
    chain: _Chain, policy: AgentPolicy, args: Mapping[str, Any], session: frozenset[str]
) -> tuple[Grant | None, str | None]:
    """The grant that allows the call (or None), and what else allowed it."""
    tool = chain.tool
    entries = policy.grants.for_tool(tool.name)
    if entries:
        fitting = [g for g in entries if g.allows(args)]
        if fitting:
            return next((g for g in fitting if g.noapproval), fitting[0]), None
        chain.ask("grant_constraint_violated", f"no grant for {tool.name} allows these arguments")
        return None, None
    if not needs_grant(tool):
        return None, "scope read, reach " + tool.reach
    if tool.name in session:
        return None, "approved earlier in this run or chat"
    if policy.mode == "allow-all":
        return None, "mode allow-all"
    rule = next((g for g in policy.allowlist if g.covers(tool.name) and g.allows(args)), None)
    if rule is not None:
        return rule, "project allowlist"
    chain.ask("not_granted", _why_not_granted(tool, policy))
    return None, None


def decide(
    tool: ToolDescriptor,
    args: Mapping[str, Any],
    policy: AgentPolicy,
    *,
    tainted: bool = False,
    session: frozenset[str] = frozenset(),
) -> Verdict:
    chain = _Chain(tool)
    if (standing := standing_denial(tool, policy)) is not None:
        return chain.deny(*standing)
    if (rule := guardrail(tool, policy.guardrails)) is not None:  # a deny has stopped above
        chain.ask(
            "org_confirm",
            f"the organisation requires confirmation for {tool.name} (rule '{rule.pattern}')",
        )
    quorum = quorum_for((tool.name, *tool.aliases), category(tool), policy.quorums)
    if quorum is not None:
        chain.ask("quorum_required", quorum.describe(tool.name))
    if (hard := hard_denial(tool, args, policy.workspace)) is not None:
        return chain.deny(*hard)
    _shell_asks(chain, tool, args)
    grant, other = _granted(chain, policy, args, session)
    waived = grant is not None and grant.noapproval
    if grant is not None or other is not None:
        chain.trail.append(f"allowed by {grant.raw if grant else other}")
        if (tool.scope == "delete" or tool.effect == "admin") and not waived:
            chain.ask(
                "confirm_destructive",
                f"{tool.name} deletes or administers; it is confirmed each time",
            )
    if (
        tainted
        and policy.untrusted_bar
        and tool.effect in RISKY_EFFECTS
        and not (waived and policy.waiver_lifts_taint)
    ):
        chain.ask(
            "untrusted_content",
            "the run has read untrusted content (files, command output, web, MCP results); "
            "this action is confirmed",
        )
    if chain.asks:
        # The first ask names the code; the reason gives every ask, so the operator's card
        # says the run is tainted even when something else asked first.
        code = chain.asks[0][0]
        reason = "; ".join(dict.fromkeys(r for _, r in chain.asks))
        return Verdict(
            "ask",
            code,
            reason,
            tool.reach,
            chain.danger,
            grant.raw if grant else None,
            waived,
            tuple(chain.trail),
            None if quorum is None else quorum.rule,
            tuple(dict.fromkeys(code for code, _ in chain.asks)),
        )
    return Verdict(
        "allow",
        None,
        _why_allowed(tool, policy, grant, other),
        tool.reach,
        chain.danger,
        grant.raw if grant else None,
        waived,
        tuple(chain.trail),
    )
