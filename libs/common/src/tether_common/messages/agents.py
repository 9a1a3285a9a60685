"""An agent as the brain's agents API stores and answers it: grants, owner, tenant (an
agent's id is unique within its tenant), whether other tenants may use it, mode,
tool categories, bars, done rule, budgets and ceilings, allowed providers and models, and
the quorum its worst calls need. One definition shared by the brain (which validates and
enforces it) and the client (which reads it typed)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether_common.messages.approvals import QuorumRule
from tether_common.messages.identity import DEFAULT_TENANT
from tether_common.messages.runs import PermissionMode
from tether_common.patterns import PatternProblem, UserPattern, compile_pattern

__all__ = [
    "BUDGET_FIELDS",
    "CATEGORIES",
    "CATEGORY_KEY",
    "AgentConfig",
    "AgentList",
    "AgentView",
    "Budgets",
    "Category",
    "DoneRule",
]

Category = Literal["read_files", "write_files", "shell", "network", "other"]
CATEGORIES: tuple[Category, ...] = ("read_files", "write_files", "shell", "network", "other")
CATEGORY_KEY = "category:"  # a quorum key naming a category rather than a tool pattern


class DoneRule(BaseModel):
    """An agent's done criterion: an answer that fails it is sent back once, with `message`."""

    model_config = ConfigDict(extra="forbid")

    pattern: str | None = Field(
        default=None, description="a regular expression the answer must match"
    )
    min_chars: int = Field(default=0, ge=0)
    message: str = "Your answer does not meet this agent's done criterion yet. Complete it."

    @field_validator("pattern")
    @classmethod
    def _linear_time(cls, pattern: str | None) -> str | None:
        # Run on model text in the event loop: RE2 only (tether_common.patterns).
        if pattern is not None and isinstance(problem := _done_pattern(pattern), PatternProblem):
            raise ValueError(problem.message)
        return pattern

    def rejects(self, answer: str) -> bool:
        if len(answer) < self.min_chars:
            return True
        if self.pattern is None:
            return False
        compiled = _done_pattern(self.pattern)
        return isinstance(compiled, UserPattern) and not compiled.search(answer)


def _done_pattern(pattern: str) -> UserPattern | PatternProblem:
    return compile_pattern(pattern, dot_all=True)


class Budgets(BaseModel):
    """A run's limits (None: none). As an agent's `budgets`, the defaults of a run that
    asks for none; as its `ceilings`, the most a run may ask for."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(default=None, ge=1, le=1000)
    max_tool_calls: int | None = Field(default=None, ge=0, le=1000)
    max_cost: float | None = Field(default=None, ge=0, le=1e9)
    max_tokens: int | None = Field(default=None, ge=1, le=2**63 - 1)
    max_seconds: float | None = Field(default=None, gt=0, le=7 * 86400)


BUDGET_FIELDS: tuple[str, ...] = tuple(Budgets.model_fields)


class AgentConfig(BaseModel):
    """One agent (`TETHER_BRAIN_AGENTS` seeds a JSON object of these by id; the agents
    API keeps them). `providers`/`models` None: any the caller may use."""

    model_config = ConfigDict(extra="forbid")

    grants: list[str] = Field(default_factory=list)
    owner: str | None = None
    tenant: str = DEFAULT_TENANT
    # Usable by every tenant's runs (never changed by them); set by an admin only. The
    # `default` tenant's `default` agent (the one a run gets naming none) always is.
    shared: bool = False
    mode: PermissionMode = "allow-reads"
    categories: list[Category] = Field(default_factory=lambda: list(CATEGORIES))
    untrusted_bar: bool = True
    waiver_lifts_taint: bool = False
    interactive: bool = False
    done: DoneRule | None = None
    budgets: Budgets = Field(default_factory=Budgets)
    ceilings: Budgets = Field(default_factory=Budgets)
    providers: list[str] | None = None
    models: list[str] | None = None
    # Two keys: a tool pattern or `category:<name>` -> the quorum its calls need
    # (the brain's `gates/quorum.py`); such a call always asks.
    quorum: dict[str, QuorumRule] = Field(default_factory=dict, max_length=50)

    @field_validator("quorum")
    @classmethod
    def _quorum_keys(cls, rules: dict[str, QuorumRule]) -> dict[str, QuorumRule]:
        for key in rules:
            if not key.strip() or len(key) > 200:
                raise ValueError("each quorum key is 1 to 200 characters")
            if key.startswith(CATEGORY_KEY) and key[len(CATEGORY_KEY) :] not in CATEGORIES:
                raise ValueError(f"quorum key '{key}': categories are {', '.join(CATEGORIES)}")
        return rules


class AgentView(AgentConfig):
    """An agent as the API answers it: its definition and where it stands."""

    id: str
    version: int
    source: str
    changed_by: str
    changed_at: datetime


class AgentList(BaseModel):
    agents: list[AgentView]
