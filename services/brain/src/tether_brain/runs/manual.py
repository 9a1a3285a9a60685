"""An operator's manual tool run (`POST /v1/tools/run`): the same gates as a model's call,
an approval request when the chain says ask, and the sealed approval spent once. A manual
run has no run row: it gets a trail of its own, `manual:<id>` (the approval's run id)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.config import Agents
from tether_brain.clients.approval import ApprovalClient
from tether_brain.gates import AgentPolicy, Verdict, decide
from tether_brain.persistence import trail
from tether_brain.state.options import RunOptions
from tether_brain.tools.toolbox import GateOutcome, Toolbox
from tether_common import audit
from tether_common.http import error_response
from tether_common.messages.approvals import ConsumeApproval, CreateApproval
from tether_common.messages.base import ErrorDetail
from tether_common.messages.gateway import CallRecord
from tether_common.messages.policy import ManualRunBody, ToolRunAsked
from tether_common.messages.runs import PermissionMode
from tether_common.messages.tools import ToolDescriptor

MANUAL = "manual:"
RUN_ID_HEADER = "X-Tether-Run-Id"
_CONSUME_STATUS = {
    "approval_stale": 409,
    "already_consumed": 409,
    "approval_pending": 409,
    "approval_denied": 403,
    "approval_expired": 403,
}


def manual_digest(agent_id: str, tool: ToolDescriptor, args: Mapping[str, Any]) -> str:
    """What a manual run's approval is sealed to: agent, tool, arguments, effect, scope."""
    action = {"manual": True, "agent": agent_id, "tool": tool.name, "arguments": dict(args)}
    action |= {"effect": tool.effect, "scope": tool.scope}
    return hashlib.sha256(audit.canonical(action).encode()).hexdigest()


def new_run_id() -> str:
    return f"{MANUAL}{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class Gated:
    """The gates' outcome: `verdict` is None when validation refused the call."""

    policy: AgentPolicy
    gate: GateOutcome
    verdict: Verdict | None


async def run_gates(
    agents: Agents,
    toolbox: Toolbox,
    tool: str,
    args: dict[str, Any],
    agent: str | None,
    *,
    tenant: str,
    mode: PermissionMode | None = None,
    tainted: bool = False,
) -> Gated:
    """Validation then the permission chain, as the loop runs them (no budget: a manual
    run or an explanation has no run to spend), with the agent `agent` names for a
    caller of `tenant` (its own, else a shared one). NotFoundError for an unknown agent
    or another tenant's."""
    key, _config = agents.resolve(tenant, agent)
    policy = agents.policy(RunOptions(agent=key[1], agent_tenant=key[0], mode=mode), tenant)
    await toolbox.catalog()
    gate = toolbox.validate(CallRecord(id="policy", name=tool, arguments=args), RunOptions())
    if not gate.allowed or gate.tool is None:
        return Gated(policy, gate, None)
    return Gated(policy, gate, decide(gate.tool, args, policy, tainted=tainted))


@dataclass(slots=True)
class ManualRuns:
    agents: Agents
    toolbox: Toolbox
    approvals: ApprovalClient
    engine: AsyncEngine
    sink: audit.JsonlSink | None = None

    async def record(self, run_id: str, event: str, data: Mapping[str, Any]) -> None:
        await trail.record(self.engine, run_id, event, data, sink=self.sink)

    async def refuse(self, run_id: str, tool: str, code: str, gate: str) -> None:
        await self.record(run_id, "gate.denied", trail.denial(tool, code, gate=gate))

    async def run(self, body: ManualRunBody, requested_by: str | None, tenant: str) -> Response:
        """`requested_by`: the principal asking (never one of a quorum's people), of
        `tenant` (whose agent `body.agent` names)."""
        found = await run_gates(
            self.agents, self.toolbox, body.tool, body.args, body.agent, tenant=tenant
        )
        run_id = new_run_id()
        if found.verdict is None or found.gate.tool is None:
            code = found.gate.code or "schema_invalid"
            await self.refuse(run_id, body.tool, code, "validation")
            return error_response(422, code, found.gate.message)
        tool, verdict = found.gate.tool, found.verdict
        if tool.name in self.toolbox.local:
            return error_response(422, "local_tool", f"{tool.name} runs only inside a run")
        if verdict.decision == "deny":
            await self.record(
                run_id, "gate.decision", trail.decision(verdict, tool.name, body.args)
            )
            await self.refuse(run_id, tool.name, verdict.code or "denied", "permissions")
            return error_response(403, verdict.code or "denied", verdict.reason)
        if body.approval_id is not None:
            return await self.with_approval(body, body.approval_id, found.policy, tool, verdict)
        await self.record(run_id, "gate.decision", trail.decision(verdict, tool.name, body.args))
        if verdict.decision == "ask":
            return await self.ask(run_id, body, found.policy, tool, verdict, requested_by)
        return await self.execute(run_id, tool, body.args)

    async def ask(
        self,
        run_id: str,
        body: ManualRunBody,
        policy: AgentPolicy,
        tool: ToolDescriptor,
        verdict: Verdict,
        requested_by: str | None = None,
    ) -> Response:
        """Create the approval request; answer 403 with its id."""
        digest = manual_digest(policy.agent_id, tool, body.args)
        request = CreateApproval(
            run_id=run_id,
            step=0,
            tool=tool.name,
            args=body.args,
            danger=verdict.danger,
            reason=f"{verdict.code}: {verdict.reason}",
            reach=verdict.reach,
            action_digest=digest,
            expires_in_s=self.approvals.expiry_s,
            agent=body.agent,
            owner=policy.owner,
            scope=tool.scope,
            effect=tool.effect,
            requested_by=requested_by,
            quorum=verdict.quorum,
        )
        bus = self.approvals.bus
        view = await bus.request(bus.subjects.approval_create, request, timeout=10.0)
        data = trail.approval_requested(view.approval_id, tool.name, digest, verdict)
        await self.record(run_id, "approval.requested", data)
        error = ErrorDetail(code=verdict.code or "ask", message=verdict.reason)
        asked = ToolRunAsked(approval_id=view.approval_id, run_id=run_id, error=error)
        return JSONResponse(asked.model_dump(mode="json"), status_code=403)

    async def with_approval(
        self,
        body: ManualRunBody,
        approval_id: str,
        policy: AgentPolicy,
        tool: ToolDescriptor,
        verdict: Verdict,
    ) -> Response:
        """Spend the approval once, for exactly this action, then run it."""
        digest = manual_digest(policy.agent_id, tool, body.args)
        bus = self.approvals.bus
        consume = ConsumeApproval(approval_id=approval_id, action_digest=digest)
        spent = await bus.request(bus.subjects.approval_consume, consume, timeout=10.0)
        view = spent.approval
        run_id = view.run_id if view.run_id.startswith(MANUAL) else new_run_id()
        await self.record(run_id, "gate.decision", trail.decision(verdict, tool.name, body.args))
        decided = trail.approval_decided(
            approval_id, view.decision or view.status, view.decided_by, outcome=spent.outcome
        )
        await self.record(run_id, "approval.decided", decided)
        if spent.outcome != "consumed":
            code = "approval_stale" if spent.outcome == "already_consumed" else spent.outcome
            await self.refuse(run_id, tool.name, code, "approval")
            why = {"already_consumed": "this approval was already used"}.get(spent.outcome)
            message = why or f"the approval cannot run this action ({spent.outcome})"
            return error_response(_CONSUME_STATUS[spent.outcome], code, message)
        return await self.execute(run_id, tool, body.args)

    async def execute(self, run_id: str, tool: ToolDescriptor, args: dict[str, Any]) -> Response:
        call = CallRecord(id=f"manual-{uuid.uuid4().hex[:12]}", name=tool.name, arguments=args)
        await self.record(run_id, "tool.call", trail.tool_call(call.id, tool.name, args))
        result = await self.toolbox.execute(run_id, call, tool)
        await self.record(run_id, "tool.result", trail.tool_result(result))
        return JSONResponse(result.model_dump(mode="json"), headers={RUN_ID_HEADER: run_id})
