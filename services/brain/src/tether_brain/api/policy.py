"""The policy API over HTTP: explain what the gates would decide, an agent's tool catalogue
with its grants, an operator's manual tool run through the same gates, changing an
agent's grants (waiver changes audited), and checking a trail against its kept head.

Grant changes are kept in PostgreSQL with their audit records and laid over the agents'
configured grants on every replica (`grant_overrides.py`).

Who may: every route takes the caller's principal (`tether_common.identity`). An agent
id names the caller's tenant's agent, else a shared one to read (`agent_reach.
addressed`; `?tenant=` another, for an admin): reading one needs `agents.read`, changing
its grants `agents.write` (an `owner` only its own agents; a shared agent only an
admin), explaining `policy.read`, a manual tool run `policy.write` (both of the
`default` tenant, with the agent the caller's tenant names), checking an audit trail
`audit.read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Response
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.config import AgentKey, Agents
from tether_brain.agents.overrides import GrantOverrides
from tether_brain.api import policy_replay
from tether_brain.api.agent_reach import addressed
from tether_brain.api.agents import TenantQuery
from tether_brain.api.deps import POLICY, REPLAY, part
from tether_brain.api.policy_models import (
    AgentCatalog,
    AuditProblem,
    AuditReport,
    CatalogEntry,
    ExplainBody,
    Explanation,
    GrantsBody,
    GrantSource,
    GrantsView,
)
from tether_brain.api.policy_replay import ReplayService
from tether_brain.clients.approval import ApprovalClient
from tether_brain.gates import AgentPolicy, parse_grants
from tether_brain.gates.grants import Grant, parse_grant
from tether_brain.gates.policy import guardrail, needs_grant, standing_denial
from tether_brain.persistence import trail
from tether_brain.runs.manual import ManualRuns, run_gates
from tether_brain.state.options import RunOptions
from tether_brain.tools.toolbox import Toolbox
from tether_common import audit
from tether_common.errors import AuthError, ErrorCode, MessageError
from tether_common.identity import DEFAULT_TENANT, Action, Principal
from tether_common.identity.http import Caller
from tether_common.messages.policy import ManualRunBody
from tether_common.messages.tools import ToolDescriptor


def blocked(tool: ToolDescriptor, policy: AgentPolicy) -> str | None:
    """The gate code that refuses the tool whatever the arguments, as the chain says it."""
    standing = standing_denial(tool, policy)
    return standing[0] if standing is not None else None


def _source(
    tool: ToolDescriptor, policy: AgentPolicy, entries: list[Grant]
) -> tuple[GrantSource | None, str | None]:
    """Which rule grants the tool, in the order the permission chain tries them."""
    if entries:
        return "grant", entries[0].raw
    if not needs_grant(tool):
        return "scope", f"scope read, reach {tool.reach}"
    if policy.mode == "allow-all":
        return "mode", "mode allow-all"
    rule = next((g for g in policy.allowlist if g.covers(tool.name)), None)
    return ("allowlist", rule.raw) if rule is not None else (None, None)


def catalog_entry(tool: ToolDescriptor, policy: AgentPolicy) -> CatalogEntry:
    entries = policy.grants.for_tool(tool.name)
    stop = blocked(tool, policy)
    source, rule = _source(tool, policy, entries)
    org = guardrail(tool, policy.guardrails)
    return CatalogEntry(
        name=tool.name,
        scope=tool.scope,
        reach=tool.reach,
        effect=tool.effect,
        output_trust=tool.output_trust,
        needs_grant=needs_grant(tool),
        granted=stop is None and source is not None,
        granted_by=source if stop is None else None,
        grants=[g.raw for g in entries],
        rule=rule if stop is None else None,
        conditional=bool(entries) and all(g.constraints for g in entries),
        waived=any(g.noapproval for g in entries),
        confirm=org is not None and org.rule == "confirm",
        blocked=stop,
    )


@dataclass(slots=True)
class PolicyService:
    agents: Agents
    toolbox: Toolbox
    engine: AsyncEngine
    manual: ManualRuns
    overrides: GrantOverrides
    sink: audit.JsonlSink | None = None

    def agent_reach(
        self, who: Principal, action: Action, agent_id: str, tenant: str | None
    ) -> AgentKey:
        """The agent `who` addresses for `action` (404 for an unknown one or one out of
        reach: an owner reaches only the agents it owns; a shared one of another tenant
        is read, never written)."""
        found = {k: c for k, c in self.agents.configs.items() if k[1] == agent_id}
        key = addressed(found, who, action, agent_id, tenant)
        shared = Agents.is_shared(key, found[key])
        if action == "agents.write" and shared and who.reach_of(action) != "all":
            raise AuthError("only an admin changes a shared agent", code=ErrorCode.FORBIDDEN)
        return key

    async def explain(self, body: ExplainBody, who: Principal) -> Explanation:
        who.require("policy.read", DEFAULT_TENANT)
        found = await run_gates(
            self.agents,
            self.toolbox,
            body.tool,
            body.args,
            body.agent,
            tenant=who.tenant,
            mode=body.mode,
            tainted=body.tainted,
        )
        agent = found.policy.agent_id
        if found.verdict is None:
            code, message = found.gate.code, found.gate.message
            return Explanation(
                tool=body.tool,
                agent=agent,
                tainted=body.tainted,
                decision="invalid",
                code=code,
                reason=message,
            )
        v = found.verdict
        return Explanation(
            tool=body.tool,
            agent=agent,
            tainted=body.tainted,
            output_trust=found.gate.tool.output_trust if found.gate.tool else None,
            decision=v.decision,
            code=v.code,
            reason=v.reason,
            reach=v.reach,
            danger=v.danger,
            grant=v.grant,
            waived=v.waived,
            trail=list(v.trail),
        )

    async def catalog(self, agent_id: str, who: Principal, tenant: str | None) -> AgentCatalog:
        key = self.agent_reach(who, "agents.read", agent_id, tenant)
        # As a run of the agent's own tenant would have it.
        policy = self.agents.policy(RunOptions(agent=agent_id, agent_tenant=key[0]), key[0])
        tools = sorted(await self.toolbox.catalog(), key=lambda t: t.name)
        return AgentCatalog(
            agent=agent_id,
            owner=policy.owner,
            mode=policy.mode,
            tool_less=policy.grants.tool_less,
            problems=list(policy.grants.problems),
            tools=[catalog_entry(t, policy) for t in tools],
        )

    async def set_grants(
        self, agent_id: str, who: Principal, grants: list[str], tenant: str | None
    ) -> GrantsView:
        key = self.agent_reach(who, "agents.write", agent_id, tenant)
        by = _by(who)
        if problems := parse_grants(grants).problems:
            raise MessageError("; ".join(problems), code=ErrorCode.INVALID_GRANT)
        new = list(grants)
        async with self.engine.begin() as conn:
            old = await self.overrides.in_force(conn, key)
            added = [g for g in new if g not in old]
            removed = [g for g in old if g not in new]
            waivers_added, waivers_removed = _waived(added), _waived(removed)
            if added or removed:
                data = trail.grants_changed(agent_id, by, added, removed)
                await trail.record(
                    conn, f"agent:{agent_id}", "grants.changed", data, sink=self.sink
                )
            if waivers_added or waivers_removed:
                data = trail.waiver_changed(agent_id, by, waivers_added, waivers_removed)
                await trail.record(
                    conn, f"agent:{agent_id}", "waiver.changed", data, sink=self.sink
                )
            # In the audit's transaction: a change that could not be audited is not made.
            await self.overrides.save(conn, key, new, by)
        await self.overrides.committed(key, new)
        return GrantsView(
            agent=agent_id,
            grants=new,
            added=added,
            removed=removed,
            waivers_added=waivers_added,
            waivers_removed=waivers_removed,
        )

    async def audit_report(self, run_id: str, who: Principal) -> AuditReport:
        who.require("audit.read")
        problems = [
            AuditProblem(kind=p.kind, seq=p.seq, detail=p.detail)
            for p in await trail.verify_run(self.engine, run_id)
        ]
        head = await trail.head_of(self.engine, run_id)
        return AuditReport(trail=run_id, head=head, intact=not problems, problems=problems)


def _by(who: Principal) -> str:
    """How a grant change names who made it: `operator` (the bootstrap admin),
    `owner:<name>` for an agent's owner, else the token's label."""
    return f"owner:{who.name}" if who.role == "owner" else who.label


def _waived(entries: list[str]) -> list[str]:
    return [raw for raw in entries if parse_grant(raw).noapproval]


def policy_state(
    agents: Agents,
    toolbox: Toolbox,
    approvals: ApprovalClient,
    overrides: GrantOverrides,
    *,
    engine: AsyncEngine,
    sink: audit.JsonlSink | None = None,
) -> dict[str, object]:
    """The parts the policy routes (`router`, with `api.policy_replay`'s) read from
    `app.state`, under their names there."""
    manual = ManualRuns(agents, toolbox, approvals, engine, sink)
    return {
        POLICY: PolicyService(agents, toolbox, engine, manual, overrides, sink),
        REPLAY: ReplayService(agents, toolbox, engine),
    }


PolicyDep = Annotated[PolicyService, part(POLICY)]

router = APIRouter(prefix="/v1", tags=["policy"])


@router.post("/policy/explain")
async def explain(body: ExplainBody, service: PolicyDep, who: Caller) -> Explanation:
    return await service.explain(body, who)


@router.get("/agents/{agent_id}/tool-catalog")
async def tool_catalog(
    agent_id: str, service: PolicyDep, who: Caller, tenant: TenantQuery = None
) -> AgentCatalog:
    return await service.catalog(agent_id, who, tenant)


@router.put("/agents/{agent_id}/grants")
async def set_grants(
    agent_id: str, body: GrantsBody, service: PolicyDep, who: Caller, tenant: TenantQuery = None
) -> GrantsView:
    return await service.set_grants(agent_id, who, body.grants, tenant)


@router.post("/tools/run", response_model=None)
async def run_tool(body: ManualRunBody, service: PolicyDep, who: Caller) -> Response:
    """An operator's manual tool run, through the same gates as a model's call."""
    who.require("policy.write", DEFAULT_TENANT)
    return await service.manual.run(body, who.name, who.tenant)


@router.get("/audit/{run_id}")
async def verify_trail(run_id: str, service: PolicyDep, who: Caller) -> AuditReport:
    return await service.audit_report(run_id, who)


router.include_router(policy_replay.router)
