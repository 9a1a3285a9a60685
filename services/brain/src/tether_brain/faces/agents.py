"""Which agents a caller may run: the agents a face offers (OpenAI models, MCP tools),
decided by the very check a run's start makes (`Access.check_use`), so a face never
lists an agent whose run the caller would be refused."""

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
    return [
        agent_id for agent_id in sorted(manager.agents.configs) if may_run(manager, who, agent_id)
    ]


def owner_of(manager: RunManager, agent_id: str) -> str | None:
    """The agent's owner, if it is still there."""
    config = manager.agents.configs.get(agent_id)
    return None if config is None else config.owner


__all__ = ["may_run", "owner_of", "runnable"]
