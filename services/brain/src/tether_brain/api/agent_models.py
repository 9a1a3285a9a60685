"""The agents API's bodies and views: an agent as written (strictly validated: a grant
that does not parse is a 422 naming it) and as answered, guardrails and allow-list
documents."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether_brain.agents.config import GLOBAL, AgentConfig, Agents
from tether_brain.agents.store import StoredAgent, StoredDocument
from tether_brain.gates.grants import NONE, parse_grant
from tether_common.messages.agents import AgentList as AgentList
from tether_common.messages.agents import AgentView as AgentView
from tether_common.messages.base import ID_PATTERN, RequestModel


def check_grants(entries: list[str]) -> list[str]:
    """Every entry in the grants grammar (`__none__` alone: a tool-less agent)."""
    if entries == [NONE]:
        return entries
    problems = []
    for raw in entries:
        try:
            parse_grant(raw)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("invalid grant: " + "; ".join(problems))
    return entries


def _names(values: list[str] | None) -> list[str] | None:
    if values is not None and any(not v or len(v) > 200 for v in values):
        raise ValueError("each name is 1 to 200 characters")
    return values


class AgentBody(AgentConfig, RequestModel):
    """An agent's whole definition (`PUT` replaces it); `version`: the one it replaces."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    grants: list[str] = Field(default_factory=list, max_length=500)
    owner: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)
    tenant: str = Field(default="default", pattern=ID_PATTERN, max_length=200)
    providers: list[str] | None = Field(default=None, max_length=100)
    models: list[str] | None = Field(default=None, max_length=100)
    version: int | None = Field(default=None, ge=0)

    @field_validator("grants")
    @classmethod
    def _grants(cls, entries: list[str]) -> list[str]:
        return check_grants(entries)

    @field_validator("providers", "models")
    @classmethod
    def _limits(cls, values: list[str] | None) -> list[str] | None:
        return _names(values)

    def config(self) -> AgentConfig:
        return AgentConfig.model_validate(self.model_dump(exclude={"version", "id"}))


class NewAgent(AgentBody):
    id: str = Field(pattern=ID_PATTERN, max_length=200)


class GuardrailsBody(RequestModel):
    rules: dict[str, Literal["confirm", "deny"]] = Field(max_length=500)
    version: int | None = Field(default=None, ge=0)

    @field_validator("rules")
    @classmethod
    def _patterns(cls, rules: dict[str, str]) -> dict[str, str]:
        if any(not p.strip() or len(p) > 200 for p in rules):
            raise ValueError("each pattern is 1 to 200 characters")
        return rules


class AllowlistBody(RequestModel):
    entries: list[str] = Field(max_length=500)
    version: int | None = Field(default=None, ge=0)

    @field_validator("entries")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        return check_grants(entries) if entries != [NONE] else _refuse_none()


def _refuse_none() -> list[str]:
    raise ValueError(f"'{NONE}' is not an allow-list entry")


class PolicyView(BaseModel):
    """`tenant` None: the organisation's; version 0: never stored (empty)."""

    kind: str
    tenant: str | None
    version: int
    changed_by: str | None
    changed_at: datetime | None


class GuardrailsView(PolicyView):
    rules: dict[str, str]


class AllowlistView(PolicyView):
    entries: list[str]


def view(found: StoredAgent) -> AgentView:
    # `shared` as in force: the built-in default always is, whatever its row says.
    shared = Agents.is_shared(found.key, found.config)
    return AgentView(
        **found.config.model_dump(exclude={"shared"}),
        shared=shared,
        id=found.agent_id,
        version=found.version,
        source=found.source,
        changed_by=found.changed_by,
        changed_at=found.changed_at,
    )


def document_view(found: StoredDocument) -> GuardrailsView | AllowlistView:
    tenant = None if found.scope == GLOBAL else found.scope
    common: dict[str, Any] = {
        "kind": found.kind,
        "tenant": tenant,
        "version": found.version,
        "changed_by": found.changed_by,
        "changed_at": found.changed_at,
    }
    if found.kind == "guardrails":
        return GuardrailsView(**common, rules=dict(found.body))
    return AllowlistView(**common, entries=list(found.body))


# ---- the rules -----------------------------------------------------------------------
