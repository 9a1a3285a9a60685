"""Which agents a caller may run: the agents a face offers (OpenAI models, MCP tools),
decided by the very check a run's start makes (`Access.check_use`), so a face never
lists an agent whose run the caller would be refused. Only the ids the caller's tenant
can name are candidates (its own agents, else shared ones: `Agents.visible_to`), so no
face shows another tenant's unshared agent."""

from __future__ import annotations

from tether_brain.runs.manager import RunManager
from tether_common.errors import AuthError, NotFoundError
from tether_common.identity import Principal
from tether_common.messages.runs import StartRun


def may_run(manager: RunManager, who: Principal, agent_id: str) -> bool:
    """Whether a run of `agent_id` with the brain's provider and model would start for
    `who` (the run's own start checks again: the agent may change in between)."""
    try:
        manager.access.check_use(who, StartRun(prompt="?", agent=agent_id))
    except (AuthError, NotFoundError):
        return False
    return True


def runnable(manager: RunManager, who: Principal) -> list[str]:
    """The ids of the agents `who` may run, sorted; 403 for a role that starts no runs."""
    who.require("runs.start")
    named = manager.agents.visible_to(who.tenant)
    return [agent_id for agent_id in sorted(named) if may_run(manager, who, agent_id)]


def owner_of(manager: RunManager, who: Principal, agent_id: str) -> str | None:
    """The owner of the agent `agent_id` names for `who`, if it is still there."""
    try:
        return manager.agents.resolve(who.tenant, agent_id)[1].owner
    except NotFoundError:
        return None


__all__ = ["may_run", "owner_of", "runnable"]
