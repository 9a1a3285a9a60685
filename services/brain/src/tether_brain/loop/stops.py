"""Why a run may take no further step (checked before each one, and before an operator's
decision is applied): the agent it runs under is gone, or its metered quota is spent.
Each check is an end reason, or None while the run may go on; the loop ends the run."""

from __future__ import annotations

from tether_brain.agents.config import Agents
from tether_brain.agents.quotas import Quotas
from tether_brain.state.quotas import exceeded
from tether_brain.state.run import RunState
from tether_common.errors import ErrorCode, NotFoundError


class Stops:
    def __init__(self, agents: Agents, quotas: Quotas | None) -> None:
        self.agents = agents
        self.quotas = quotas  # a metered run's tokens and cost held to its quotas

    def agent_gone(self, state: RunState) -> str | None:
        """The end reason of a run whose agent it may no longer use (deleted, or no longer
        shared with the run's tenant, since the run started); None while it may, so
        nothing more is done under an agent the run has lost."""
        try:
            self.agents.of_run(state.options, state.tenant)
        except NotFoundError as exc:
            return f"agent_unavailable: {exc.message}"
        return None

    async def spent_up(self, state: RunState) -> str | None:
        """The end reason of a metered run whose tenant's or agent's token or cost quota
        is spent (the step that spent it was finished and committed first); None while
        it is not."""
        if self.quotas is None or not state.options.metered:
            return None
        refused = await self.quotas.spent_up(state)
        if refused is None:
            return None
        return f"{ErrorCode.QUOTA_EXCEEDED}: {exceeded(refused).message}"
