"""Agents (`/v1/agents`): list, read, create, replace (at a version), delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether_client.resources.core import ClientCore, parse, raise_for_error, tenant_param

# The agents' models load with the first call that needs them: a command that only reads
# runs (`tether runs list`) does not pay for building them.
if TYPE_CHECKING:
    from tether_common.messages.agents import AgentConfig, AgentView

__all__ = ["Agents"]


def _definition(agent: AgentConfig) -> dict[str, Any]:
    """What the agent was given, without a view's own fields (id, version, changed_*)."""
    from tether_common.messages.agents import AgentConfig, AgentView

    own = set(AgentView.model_fields) - set(AgentConfig.model_fields)
    return agent.model_dump(mode="json", exclude_unset=True, exclude=own)


class Agents(ClientCore):
    """Agent definitions."""

    async def list_agents(self) -> list[AgentView]:
        """The agents the caller may read."""
        from tether_common.messages.agents import AgentList

        return (await self._call(AgentList, "GET", "/v1/agents")).agents

    async def get_agent(self, agent_id: str, tenant: str | None = None) -> AgentView:
        """The agent `agent_id` names for the caller (its tenant's, else a shared one);
        `tenant`: that tenant's (an admin's choice)."""
        from tether_common.messages.agents import AgentView

        path = f"/v1/agents/{agent_id}"
        return await self._call(AgentView, "GET", path, params=tenant_param(tenant))

    async def create_agent(self, agent_id: str, definition: AgentConfig) -> AgentView:
        """A new agent; only the fields `definition` was given are sent (the rest are the
        server's defaults)."""
        from tether_common.messages.agents import AgentView

        body = {"id": agent_id, **_definition(definition)}
        response = await self._http.post("/v1/agents", json=body)
        raise_for_error(response)
        return parse(AgentView.model_validate_json, response)

    async def replace_agent(
        self, agent_id: str, definition: AgentConfig, *, version: int, tenant: str | None = None
    ) -> AgentView:
        """The agent's whole definition replaced, if it still stands at `version` (else
        `ConflictError`)."""
        from tether_common.messages.agents import AgentView

        response = await self._http.put(
            f"/v1/agents/{agent_id}",
            json=_definition(definition),
            params=tenant_param(tenant),
            headers={"If-Match": f'"{version}"'},
        )
        raise_for_error(response)
        return parse(AgentView.model_validate_json, response)

    async def delete_agent(self, agent_id: str, tenant: str | None = None) -> None:
        await self._send("DELETE", f"/v1/agents/{agent_id}", params=tenant_param(tenant))
