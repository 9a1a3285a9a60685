"""Policy what-if over HTTP:

    POST /v1/policy/replay   a proposed agent policy against the agent's recorded calls
    POST /v1/policy/suggest  the narrowest grants its recorded calls needed (never applied)

Who may: `policy.read` on the agent's tenant (admins, and that tenant's operators): the
answer shows the agent's calls, their arguments (cut as in run events) and who decided
them. Another tenant's agent is a 404, as if missing; a role without `policy.read` a 403.
Only runs the caller may read count (`runs.read`: an operator's own tenant's).

A window is `since` (required) to `until` (default now), both with a time zone, at most
`MAX_WINDOW_DAYS` long. A proposal is an agent definition as the agents API takes it
(validated by the same model: a grant that does not parse is a 422 naming it), with
`guardrails` optionally standing for the organisation's and the tenant's rules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal, Self

from fastapi import APIRouter
from pydantic import AwareDatetime, Field, field_validator, model_validator
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_brain.agents.config import AgentConfig, Agents
from tether_brain.api.agent_models import AgentBody
from tether_brain.api.agent_reach import addressed, reaches
from tether_brain.api.deps import REPLAY, part
from tether_brain.policy.replay import Proposal, Recorded, recorded, replay
from tether_brain.policy.suggest import suggest
from tether_brain.tools.toolbox import Toolbox
from tether_common.errors import NotFoundError
from tether_common.http import error_responses
from tether_common.identity import Principal
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN, RequestModel
from tether_common.messages.policy_replay import (
    DEFAULT_REPLAY_LIMIT,
    MAX_REPLAY_LIMIT,
    ReplayReport,
    Suggestion,
)

__all__ = ["MAX_WINDOW_DAYS", "ReplayBody", "ReplayService", "SuggestBody", "router"]

MAX_WINDOW_DAYS = 93
ERRORS = error_responses(
    {
        401: "no valid bearer token (`unauthenticated`, `token_expired`)",
        403: "the role may not read policy (`forbidden`)",
        404: "no such agent, or one of another tenant (`not_found`)",
        422: "the body, the proposal or the window does not validate (`invalid_request`)",
    }
)


class SuggestBody(RequestModel):
    agent: str = Field(pattern=ID_PATTERN, max_length=200)
    since: AwareDatetime
    until: AwareDatetime | None = Field(default=None, description="default: now")

    @model_validator(mode="after")
    def _window(self) -> Self:
        until = self.until or datetime.now(UTC)
        try:  # PostgreSQL stores these in UTC: a time that UTC cannot hold is refused here
            since, until = self.since.astimezone(UTC), until.astimezone(UTC)
        except OverflowError:
            raise ValueError("since and until must be times UTC can hold") from None
        if since >= until:
            raise ValueError("since must be before until")
        if until - since > timedelta(days=MAX_WINDOW_DAYS):
            raise ValueError(f"a window is at most {MAX_WINDOW_DAYS} days")
        return self

    def end(self) -> datetime:
        return self.until or datetime.now(UTC)


class ReplayBody(SuggestBody):
    proposal: AgentBody
    guardrails: dict[str, Literal["confirm", "deny"]] | None = Field(default=None, max_length=500)
    limit: int = Field(default=DEFAULT_REPLAY_LIMIT, ge=1, le=MAX_REPLAY_LIMIT)
    only_changed: bool = True

    @field_validator("guardrails")
    @classmethod
    def _patterns(cls, rules: dict[str, str] | None) -> dict[str, str] | None:
        if rules is not None and any(not p.strip() or len(p) > 200 for p in rules):
            raise ValueError("each guardrail pattern is 1 to 200 characters")
        return rules


class ReplayService:
    def __init__(self, agents: Agents, toolbox: Toolbox, engine: AsyncEngine) -> None:
        self.agents = agents
        self.toolbox = toolbox
        self.engine = engine

    def reach(self, who: Principal, agent_id: str) -> AgentConfig:
        """The agent in force that `agent_id` names for `who`, if `who` may read its
        policy and history: its own tenant's (an admin: the only one of that id)."""
        found = {k: c for k, c in self.agents.configs.items() if k[1] == agent_id}
        key = addressed(found, who, "policy.read", agent_id)
        if not reaches(found, who, "policy.read", key):  # a shared one's history is not ours
            raise NotFoundError(f"no agent '{agent_id}'")
        return found[key]

    async def history(self, body: SuggestBody, who: Principal, tenant: str) -> Recorded:
        """The calls in the agent's tenant's runs, if `who` may read them."""
        who.require("runs.read", tenant)
        await self.toolbox.catalog()  # the descriptors the calls are judged with
        return await recorded(
            self.engine, body.agent, body.since, body.end(), self.toolbox.descriptor, tenant=tenant
        )

    async def replay(self, body: ReplayBody, who: Principal) -> ReplayReport:
        config = self.reach(who, body.agent)
        # The proposal is judged as the agent's tenant's (its tenant is not the body's).
        proposed = body.proposal.config().model_copy(update={"tenant": config.tenant})
        found = await self.history(body, who, config.tenant)
        return replay(
            self.agents,
            Proposal(proposed, body.guardrails),
            found,
            limit=body.limit,
            only_changed=body.only_changed,
        )

    async def suggest(self, body: SuggestBody, who: Principal) -> Suggestion:
        config = self.reach(who, body.agent)
        return suggest(self.agents, config, await self.history(body, who, config.tenant))


ReplayDep = Annotated[ReplayService, part(REPLAY)]

router = APIRouter(prefix="/policy", tags=["policy"])  # under api.policy's /v1


@router.post("/replay", responses=ERRORS)
async def replay_policy(body: ReplayBody, service: ReplayDep, who: Caller) -> ReplayReport:
    """Decide the agent's recorded calls again under a proposed policy; what would
    change, counted by transition and by tool. Nothing is changed."""
    return await service.replay(body, who)


@router.post("/suggest", responses=ERRORS)
async def suggest_grants(body: SuggestBody, service: ReplayDep, who: Caller) -> Suggestion:
    """The narrowest grants the agent's recorded calls needed, as a diff against its
    grants in force. Never applied."""
    return await service.suggest(body, who)
