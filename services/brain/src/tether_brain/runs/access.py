"""Who may do what with runs: the caller's principal checked against the stored run
(tenant, owner, the agent's owner) and, at start, against the agent, provider and model
it asks for. Answers 403 for a role that never may, 404 for what is out of reach.

The agent a run asks for is resolved within the caller's tenant (its own agent of that
id, else a shared one; `Agents.resolve`), for every caller, admins included: a run is
its tenant's, and so is the policy it runs under."""

from __future__ import annotations

from dataclasses import dataclass

from tether_brain.agents.config import AgentConfig, AgentKey, Agents
from tether_brain.persistence.store import RunStore
from tether_brain.state.run import DEFAULT_AGENT
from tether_common.errors import AuthError, ErrorCode, NotFoundError
from tether_common.identity import Action, Principal
from tether_common.messages.agents import ModelChoice
from tether_common.messages.runs import StartRun


@dataclass(frozen=True, slots=True)
class Use:
    """What a start may use: the provider, the model and the agent (its key pinned on
    the run as `RunOptions.agent_tenant`)."""

    provider: str
    model: str | None
    agent: AgentKey
    config: AgentConfig
    # The agent's fallback chain as the starter may use it (`Access.fallback_for`).
    fallback: tuple[ModelChoice, ...] = ()


class Access:
    def __init__(
        self, store: RunStore, agents: Agents, *, provider: str, model: str | None
    ) -> None:
        self.store = store
        self.agents = agents
        self.provider = provider  # the brain's configured provider and model
        self.model = model

    async def authorize(self, who: Principal, action: Action, run_id: str) -> None:
        """`who` may take `action` on the run: 403 for a role that never may, 404 (as for
        a missing run) for a run out of its reach. Checked on the stored row, whose tenant
        and owner never change after the run is made."""
        tenant, owner, agent = await self.store.queries.belongs(run_id)
        self.require(who, action, (tenant, owner, agent), what=f"run '{run_id}'")

    def require(
        self,
        who: Principal,
        action: Action,
        belongs: tuple[str, str | None, str | None],
        *,
        what: str,
    ) -> None:
        """`who` may take `action` on what `belongs` to (tenant, owner, agent): 403 for a
        role that never may, else 404 `no <what>`, word for word the answer for one that
        does not exist (a run, a thread)."""
        tenant, owner, agent = belongs
        try:
            who.require(action, tenant, owner, agent_owner=self._agent_owner(tenant, agent))
        except NotFoundError:
            raise NotFoundError(f"no {what}") from None

    def _agent_owner(self, tenant: str, agent: str | None) -> str | None:
        """The owner of the run's agent, if it is its tenant's own (the owner of a shared
        agent is no owner of another tenant's runs)."""
        try:
            key, config = self.agents.resolve(tenant, agent)
        except NotFoundError:
            return None
        return config.owner if key[0] == tenant else None

    def check_use(self, who: Principal, req: StartRun) -> Use:
        """The provider and model the run will use, if `who` may use them with the agent
        and mode asked for (403 naming the first refused). A role below operator with no
        agent, provider or model limit of its own gets the brain's configured ones (the
        default agent, the configured provider and model): which agent acts and which
        hosted provider is billed is configuration, never the caller's choice."""
        who.require("runs.start")
        provider = req.provider or self.provider
        model = req.model or self.model
        # The caller's tenant's agent, else a shared one; another tenant's looks missing.
        key, config = self.agents.resolve(who.tenant, req.agent)
        agent = key[1]
        who.check_use(agent=agent, provider=provider, model=model, mode=req.mode)
        self.agents.check_use(agent, config, provider, model)  # the agent's own lists
        use = Use(provider, model, key, config, self.fallback_for(who, config))
        if _above(who):
            return use
        # Below operator, what the token does not list is the configured default (an
        # owner may also use its own agents).
        mine = key[0] == who.tenant and config.owner == who.name
        if who.agents is None and agent != DEFAULT_AGENT and not mine:
            raise AuthError(f"this token may not use the agent '{agent}'", code=ErrorCode.FORBIDDEN)
        if (refused := self._unlisted(who, provider, model)) is not None:
            raise refused
        return use

    def fallback_for(self, who: Principal, config: AgentConfig) -> tuple[ModelChoice, ...]:
        """The agent's fallback chain as `who` may use it: an entry it could not start a
        run on itself (its token's lists; below operator, the configured provider and
        model) is left out, so a chain never widens what a caller may use or be billed
        for, and never refuses a run that may use its own model."""
        kept: list[ModelChoice] = []
        for entry in config.fallback:
            try:
                who.check_use(provider=entry.provider, model=entry.model)
            except AuthError:
                continue
            if _above(who) or self._unlisted(who, entry.provider, entry.model) is None:
                kept.append(entry)
        return tuple(kept)

    def _unlisted(self, who: Principal, provider: str, model: str | None) -> AuthError | None:
        """Below operator, what the token does not list is the configured default."""
        if who.providers is None and provider != self.provider:
            return AuthError(
                f"this token may not use the provider '{provider}'", code=ErrorCode.FORBIDDEN
            )
        if who.models is None and model != self.model:
            return AuthError(
                f"this token may not use the model '{model}'", code=ErrorCode.FORBIDDEN
            )
        return None


def _above(who: Principal) -> bool:
    """An admin or operator: may use any provider and model its token lists allow."""
    return who.reach_of("runs.start") == "all" or who.role == "operator"
