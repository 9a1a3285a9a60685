"""Tools and policy: the tool list, what the gates would decide for a call (`explain`),
an agent's tool catalogue, an operator's manual tool run, a run's audit-trail check."""

from __future__ import annotations

from typing import Any, Final

import httpx
from pydantic import TypeAdapter

from tether_client.resources.core import ClientCore, parse, raise_for_error, to_wire
from tether_common.messages.audit import AuditReport
from tether_common.messages.policy import (
    AgentCatalog,
    ExplainBody,
    Explanation,
    ManualRunBody,
    ToolRunAsked,
)
from tether_common.messages.runs import PermissionMode
from tether_common.messages.tools import ToolDescriptor
from tether_common.messages.tools import ToolResult as ToolRunResult

__all__ = ["Policy", "ToolRunResult"]

_TOOLS: Final = TypeAdapter(list[ToolDescriptor])


def _is_ask(response: httpx.Response) -> bool:
    try:
        found = response.json()
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("decision") == "ask"


class Policy(ClientCore):
    """What the gates allow, and the manual runs and audits that go through them."""

    async def tools(self) -> list[ToolDescriptor]:
        return parse(_TOOLS.validate_json, await self._send("GET", "/v1/tools"))

    async def explain(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        agent: str | None = None,
        mode: PermissionMode | None = None,
        tainted: bool = False,
    ) -> Explanation:
        """What the gates would decide for this call, and why (nothing runs)."""
        body = ExplainBody(tool=tool, args=args, agent=agent, mode=mode, tainted=tainted)
        return await self._call(Explanation, "POST", "/v1/policy/explain", body)

    async def tool_catalog(self, agent_id: str) -> AgentCatalog:
        """Every tool with its scope, reach and whether (and by what) `agent_id` has it."""
        return await self._call(AgentCatalog, "GET", f"/v1/agents/{agent_id}/tool-catalog")

    async def run_tool(
        self,
        tool: str,
        args: dict[str, Any],
        token: str,
        *,
        agent: str | None = None,
        approval_id: str | None = None,
    ) -> ToolRunResult | ToolRunAsked:
        """An operator's manual tool run through the same gates as a run's calls (operator
        token). The tool's result, or `ToolRunAsked` (the approval request to decide, then
        send again with `approval_id`) when the gates want one first; a refusal raises."""
        body = ManualRunBody(tool=tool, args=args, agent=agent, approval_id=approval_id)
        headers = {"Authorization": f"Bearer {token}"}
        response = await self._http.post("/v1/tools/run", json=to_wire(body), headers=headers)
        if response.status_code == 403 and _is_ask(response):
            return parse(ToolRunAsked.model_validate_json, response)
        raise_for_error(response)
        return parse(ToolRunResult.model_validate_json, response)

    async def verify_audit(self, run_id: str, token: str) -> AuditReport:
        """The brain's check of a run's audit trail against its kept head (operator token)."""
        headers = {"Authorization": f"Bearer {token}"}
        return await self._call(AuditReport, "GET", f"/v1/audit/{run_id}", headers=headers)
