"""Which agent a call to the agents and policy routes addresses by id: the caller's
tenant's (`?tenant=` names another, for an admin), else a shared one to read; for an
admin naming no tenant, the only agent of that id in any tenant.

An agent out of the caller's reach is a 404 word for word as for none, before anything
about it is answered (its version, whether it exists); a shared agent of another
tenant is readable (`agents.read`, `policy.read`), never writable, by other tenants."""

from __future__ import annotations

from collections.abc import Mapping

from tether_brain.agents.config import AgentConfig, AgentKey, Agents
from tether_common.errors import ErrorCode, MessageError, NotFoundError
from tether_common.identity import Action, Principal

READS: frozenset[Action] = frozenset({"agents.read", "policy.read"})


def addressed(
    found: Mapping[AgentKey, AgentConfig],
    who: Principal,
    action: Action,
    agent_id: str,
    tenant: str | None = None,
) -> AgentKey:
    """The key of the agent `who` addresses as `agent_id` (and `tenant`) for `action`,
    among `found` (every stored agent of that id); 403 for a role that never may take
    `action`, 404 `no agent` for one out of reach or missing."""
    who.require(action)
    mine = [k for k in found if k[1] == agent_id and reaches(found, who, action, k)]
    if tenant is not None:
        key = (tenant, agent_id)
        if key in mine or (action in READS and _shared(found, key)):
            return key
        raise NotFoundError(f"no agent '{agent_id}'")
    own = (who.tenant, agent_id)
    if own in mine:
        return own
    if who.reach_of(action) == "all" and mine:
        if len(mine) > 1:
            tenants = ", ".join(sorted(k[0] for k in mine))
            raise MessageError(
                f"agent '{agent_id}' is in several tenants ({tenants}): name one with ?tenant=",
                code=ErrorCode.INVALID_REQUEST,
            )
        return mine[0]
    if action in READS:
        shared = sorted(k for k in found if k[1] == agent_id and _shared(found, k))
        if shared:
            return shared[0]
    raise NotFoundError(f"no agent '{agent_id}'")


def reaches(
    found: Mapping[AgentKey, AgentConfig], who: Principal, action: Action, key: AgentKey
) -> bool:
    """`who` may take `action` on the agent `key` as its own tenant's (or an admin)."""
    config = found[key]
    return who.sees(action, key[0], config.owner, agent_owner=config.owner)


def _shared(found: Mapping[AgentKey, AgentConfig], key: AgentKey) -> bool:
    config = found.get(key)
    return config is not None and Agents.is_shared(key, config)


__all__ = ["READS", "addressed", "reaches"]
