"""Agents and the organisation policy in force on this replica: each agent's grants,
owner, tenant, mode, bars, budgets and allowed providers/models, the organisation
guardrails and the shell allow-list (global, and per tenant on top); and the effective
policy of a run (a request may narrow the agent's mode, never widen it).

Agents are keyed by (tenant, id). An id names, for a caller of a tenant, that tenant's
agent, else the shared one of that id (`shared: true`, set by an admin; the built-in
`default` of the `default` tenant always is); another tenant's unshared agent looks
exactly like none. A run pins the agent it resolved at its start (`RunOptions.
agent_tenant`), so its children and its later steps use that very agent, and lose it
(404) once it is deleted or no longer shared with the run's tenant.

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
from tether_common.messages.identity import DEFAULT_TENANT

MODE_RANK: dict[str, int] = {"read-only": 0, "allow-reads": 1, "allow-all": 2}


GLOBAL = "*"  # the scope of organisation-wide guardrails and allow-list (never a tenant id)
AgentKey = tuple[str, str]  # (tenant, agent id): an agent's id is unique within its tenant
BUILT_IN: AgentKey = (DEFAULT_TENANT, DEFAULT_AGENT)  # the agent a run naming none gets


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """Everything in force, as read in one transaction; `generation` grows with every
    stored change, so an older snapshot never replaces a newer one."""

    generation: int
    agents: dict[AgentKey, AgentConfig]
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


def keyed(configs: Mapping[str, AgentConfig]) -> dict[AgentKey, AgentConfig]:
    """The settings' agents (a JSON object by id) by (tenant, id), over the built-in."""
    found = {(c.tenant, agent_id): c for agent_id, c in configs.items()}
    return {BUILT_IN: AgentConfig(shared=True)} | found


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
        self.seeds = keyed(configs)
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

    # ---- which agent an id names, for whom ----------------------------------------

    @staticmethod
    def is_shared(key: AgentKey, config: AgentConfig) -> bool:
        """Other tenants may use it: marked shared by an admin, or the built-in default."""
        return config.shared or key == BUILT_IN

    def usable_by(self, tenant: str, key: AgentKey, config: AgentConfig) -> bool:
        return key[0] == tenant or self.is_shared(key, config)

    def resolve(self, tenant: str, agent_id: str | None) -> tuple[AgentKey, AgentConfig]:
        """The agent `agent_id` (None: the default) names for a caller of `tenant`: its
        own tenant's, else a shared one; 404 as for a missing one otherwise (another
        tenant's unshared agent looks exactly like none)."""
        name = agent_id or DEFAULT_AGENT
        own = self.configs.get((tenant, name))
        if own is not None:
            return (tenant, name), own
        shared = sorted(
            ((key, c) for key, c in self.configs.items() if key[1] == name),
            key=lambda pair: pair[0],
        )
        shared = [(key, c) for key, c in shared if self.is_shared(key, c)]
        if not shared:
            raise NotFoundError(f"no agent '{name}'")
        # Shared ids are kept unique (the store refuses a second); the built-in's tenant
        # sorts first only as a tie-break for rows written before that rule.
        return min(shared, key=lambda pair: pair[0][0] != DEFAULT_TENANT)

    def of_run(self, options: RunOptions, tenant: str) -> AgentConfig:
        """The agent of a run of `tenant`: the one pinned at its start (`agent_tenant`),
        as long as it is there and still the tenant's to use (an agent unshared or
        deleted since is gone for the run: 404)."""
        name = options.agent or DEFAULT_AGENT
        if options.agent_tenant is None:  # a run stored before agents had tenant keys
            return self.resolve(tenant, name)[1]
        key = (options.agent_tenant, name)
        found = self.configs.get(key)
        if found is None or not self.usable_by(tenant, key, found):
            raise NotFoundError(f"no agent '{name}' for this run's tenant")
        return found

    def visible_to(self, tenant: str) -> dict[str, tuple[AgentKey, AgentConfig]]:
        """Every agent id a caller of `tenant` can name, and the agent it names there."""
        found: dict[str, tuple[AgentKey, AgentConfig]] = {}
        for key in sorted(self.configs):
            if key[1] not in found:
                try:
                    found[key[1]] = self.resolve(tenant, key[1])
                except NotFoundError:
                    continue
        return found

    def owned_by(self, tenant: str, owner: str) -> list[str]:
        """The ids of the agents of `tenant` that `owner` owns (its runs are theirs too)."""
        return sorted(a for (t, a), c in self.configs.items() if t == tenant and c.owner == owner)

    def lay_grants(self, overrides: dict[AgentKey, list[str]]) -> None:
        """Lay changed grants over the seeds (all of them: an agent missing from
        `overrides` has its seeded grants again). Unknown agents are ignored."""
        self.configs = {
            key: config
            if key not in overrides
            else config.model_copy(update={"grants": list(overrides[key])})
            for key, config in self.seeds.items()
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

    @staticmethod
    def check_use(agent_id: str, config: AgentConfig, provider: str, model: str | None) -> None:
        """403 `forbidden` when the agent may not run on this provider or model."""
        for kind, value, allowed in (
            ("provider", provider, config.providers),
            ("model", model, config.models),
        ):
            if allowed is not None and value not in allowed:
                raise AuthError(
                    f"the agent '{agent_id}' may not use the {kind} '{value}'",
                    code=ErrorCode.FORBIDDEN,
                )

    @staticmethod
    def budgets(config: AgentConfig, asked: Mapping[str, Any]) -> dict[str, Any]:
        """A run's limits: what it asked for, else the agent's default; never above the
        agent's ceiling (a run asking for none gets the ceiling)."""
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
        tenant: str,
        proposal: AgentConfig | None = None,
        guardrails: Mapping[str, Rule] | None = None,
    ) -> AgentPolicy:
        """The policy in force for a run of `tenant` with `options` (its agent, at most
        its mode); with a `proposal` (and proposed `guardrails`), the policy the run would
        have had under it (`POST /v1/policy/replay`). The guardrails are the run's
        tenant's and the agent's tenant's on the organisation's (each only tightens); the
        allow-list, which widens, is the run's tenant's only: a shared agent's tenant
        never widens what another tenant's runs may do."""
        config = proposal or self.of_run(options, tenant)
        mode = config.mode
        asked = options.mode
        if asked is not None and MODE_RANK[asked] < MODE_RANK[mode]:
            mode = asked
        if guardrails is None:
            guardrails = merge_guardrails(
                self.guardrails_for(tenant), self.guardrails_for(config.tenant)
            )
        return AgentPolicy(
            agent_id=options.agent or DEFAULT_AGENT,
            grants=parse_grants(config.grants),
            workspace=self.workspace,
            owner=config.owner,
            mode=mode,
            categories=frozenset(config.categories),
            guardrails=guardrails,
            allowlist=self.allowlist_for(tenant),
            untrusted_bar=config.untrusted_bar,
            waiver_lifts_taint=config.waiver_lifts_taint,
            quorums=dict(config.quorum),
        )
