"""Agents and the organisation policy in force on this replica: each agent's grants,
owner, tenant, mode, bars, budgets and allowed providers/models, the organisation
guardrails and the shell allow-list (global, and per tenant on top); and the effective
policy of a run (a request may narrow the agent's mode, never widen it).

The settings (`TETHER_BRAIN_AGENTS`, `_GUARDRAILS`, `_ALLOWLIST`) only seed what is in
force: `agent_store.py` keeps the real definitions in PostgreSQL and `install`s them
here on every change; `grant_overrides.py` lays grant changes over the seeds where no
store is in use (tests serving the policy routes alone)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tether_brain.gates import AgentPolicy, parse_grants
from tether_brain.gates.grants import Grant, parse_grant
from tether_brain.gates.policy import RULE_RANK, Rule
from tether_brain.state.options import RunOptions
from tether_brain.state.run import DEFAULT_AGENT
from tether_common.errors import AuthError, ErrorCode, NotFoundError
from tether_common.messages.agents import BUDGET_FIELDS as BUDGET_FIELDS
from tether_common.messages.agents import AgentConfig as AgentConfig
from tether_common.messages.agents import Budgets as Budgets
from tether_common.messages.agents import DoneRule as DoneRule

MODE_RANK: dict[str, int] = {"read-only": 0, "allow-reads": 1, "allow-all": 2}


GLOBAL = "*"  # the scope of organisation-wide guardrails and allow-list (never a tenant id)


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """Everything in force, as read in one transaction; `generation` grows with every
    stored change, so an older snapshot never replaces a newer one."""

    generation: int
    agents: dict[str, AgentConfig]
    guardrails: dict[str, dict[str, Rule]] = field(default_factory=dict)  # scope -> rules
    allowlist: dict[str, list[str]] = field(default_factory=dict)  # scope -> entries


def merge_guardrails(*layers: Mapping[str, Rule]) -> dict[str, Rule]:
    """Layers of rules as one: the same pattern in two layers keeps the stronger rule, so a
    tenant's rules can tighten the organisation's, never loosen them."""
    merged: dict[str, Rule] = {}
    for layer in layers:
        for pattern, rule in layer.items():
            kept = merged.get(pattern)
            if kept is None or RULE_RANK[rule] > RULE_RANK[kept]:
                merged[pattern] = rule
    return merged


def _parsed(entries: list[str]) -> tuple[Grant, ...]:
    found = []
    for raw in entries:
        try:
            found.append(parse_grant(raw))
        except ValueError:  # the API refuses these; a bad seed grants nothing
            continue
    return tuple(found)


class Agents:
    def __init__(
        self,
        configs: dict[str, AgentConfig],
        *,
        workspace: Path,
        guardrails: dict[str, Literal["confirm", "deny"]],
        allowlist: list[str],
    ) -> None:
        # The seeds (settings), kept for the store's first start and for grant overlays.
        self.seeds = {DEFAULT_AGENT: AgentConfig()} | configs
        self.seed_guardrails = guardrails
        self.seed_allowlist = list(allowlist)
        self.workspace = workspace
        # In force (replaced whole by `install`, or grants laid over by `lay_grants`).
        self.configs = dict(self.seeds)
        self.guardrails = guardrails
        self.allowlist = tuple(parse_grant(rule) for rule in allowlist)  # a bad seed stops
        self._tenant_guardrails: dict[str, dict[str, Rule]] = {}
        self._tenant_allowlist: dict[str, tuple[Grant, ...]] = {}
        self.generation = -1

    def config(self, agent_id: str | None) -> AgentConfig:
        found = self.configs.get(agent_id or DEFAULT_AGENT)
        if found is None:
            raise NotFoundError(f"no agent '{agent_id}'")
        return found

    def lay_grants(self, overrides: dict[str, list[str]]) -> None:
        """Lay changed grants over the seeds (all of them: an agent missing from
        `overrides` has its seeded grants again). Unknown agents are ignored."""
        self.configs = {
            agent_id: config
            if agent_id not in overrides
            else config.model_copy(update={"grants": list(overrides[agent_id])})
            for agent_id, config in self.seeds.items()
        }

    def install(self, snapshot: PolicySnapshot) -> bool:
        """Put a stored snapshot in force (one assignment each, never half of one);
        False, and nothing changed, when it is older than the one in force."""
        if snapshot.generation < self.generation:
            return False
        guardrails = dict(snapshot.guardrails)
        allowlist = dict(snapshot.allowlist)
        self.configs = dict(snapshot.agents)
        self.guardrails = guardrails.pop(GLOBAL, {})
        self.allowlist = _parsed(allowlist.pop(GLOBAL, []))
        self._tenant_guardrails = guardrails
        self._tenant_allowlist = {scope: _parsed(rules) for scope, rules in allowlist.items()}
        self.generation = snapshot.generation
        return True

    def guardrails_for(self, tenant: str) -> Mapping[str, Rule]:
        """The organisation's rules with the tenant's on top (stronger wins)."""
        own = self._tenant_guardrails.get(tenant)
        return self.guardrails if not own else merge_guardrails(self.guardrails, own)

    def allowlist_for(self, tenant: str) -> tuple[Grant, ...]:
        return self.allowlist + self._tenant_allowlist.get(tenant, ())

    def check_use(self, agent_id: str | None, provider: str, model: str | None) -> None:
        """403 `forbidden` when the agent may not run on this provider or model."""
        config = self.config(agent_id)
        for kind, value, allowed in (
            ("provider", provider, config.providers),
            ("model", model, config.models),
        ):
            if allowed is not None and value not in allowed:
                raise AuthError(
                    f"the agent '{agent_id or DEFAULT_AGENT}' may not use the {kind} '{value}'",
                    code=ErrorCode.FORBIDDEN,
                )

    def budgets(self, agent_id: str | None, asked: Mapping[str, Any]) -> dict[str, Any]:
        """A run's limits: what it asked for, else the agent's default; never above the
        agent's ceiling (a run asking for none gets the ceiling)."""
        config = self.config(agent_id)
        limits: dict[str, Any] = {}
        for name in BUDGET_FIELDS:
            value = asked.get(name)
            if value is None:
                value = getattr(config.budgets, name)
            ceiling = getattr(config.ceilings, name)
            if ceiling is not None:
                value = ceiling if value is None else min(value, ceiling)
            limits[name] = value
        return limits

    def policy(
        self,
        options: RunOptions,
        proposal: AgentConfig | None = None,
        guardrails: Mapping[str, Rule] | None = None,
    ) -> AgentPolicy:
        """The policy in force for a run with `options` (its agent, at most its mode);
        with a `proposal` (and proposed `guardrails`, else those in force for the agent's
        tenant), the policy the run would have had under it (`POST /v1/policy/replay`)."""
        agent_id = options.agent
        current = self.config(agent_id)
        config = proposal or current
        mode = config.mode
        asked = options.mode
        if asked is not None and MODE_RANK[asked] < MODE_RANK[mode]:
            mode = asked
        return AgentPolicy(
            agent_id=agent_id or DEFAULT_AGENT,
            grants=parse_grants(config.grants),
            workspace=self.workspace,
            owner=config.owner,
            mode=mode,
            categories=frozenset(config.categories),
            guardrails=self.guardrails_for(current.tenant) if guardrails is None else guardrails,
            allowlist=self.allowlist_for(current.tenant),
            untrusted_bar=config.untrusted_bar,
            waiver_lifts_taint=config.waiver_lifts_taint,
            quorums=dict(config.quorum),
        )
