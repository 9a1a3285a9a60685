"""An agent as the brain's agents API stores and answers it: grants, owner, tenant (an
agent's id is unique within its tenant), whether other tenants may use it, mode,
tool categories, bars, done rule, budgets and ceilings, allowed providers and models (and
the fallback chain within them), the quorum its worst calls need, and what its
model is told (`instructions`) and given (`prefetch`) before its first turn. One definition
shared by the brain (which validates and enforces it) and the client (which reads it
typed)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tether_common import templating
from tether_common.messages.approvals import QuorumRule
from tether_common.messages.identity import DEFAULT_TENANT
from tether_common.messages.quotas import Quota
from tether_common.messages.runs import PermissionMode
from tether_common.patterns import PatternProblem, UserPattern, compile_pattern
from tether_common.typed_answers import checked_output_schema

__all__ = [
    "BUDGET_FIELDS",
    "CATEGORIES",
    "CATEGORY_KEY",
    "FALLBACK_ON",
    "INSTRUCTIONS_CHARS",
    "PREFETCH_ARGUMENTS_CHARS",
    "PREFETCH_CALLS",
    "AgentConfig",
    "AgentList",
    "AgentView",
    "Budgets",
    "Category",
    "DoneRule",
    "FallbackOn",
    "ModelChoice",
    "PrefetchCall",
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

# Why a model turn may go on with the next model of an agent's fallback chain: the
# provider failed (5xx, no connection, a dropped stream), refused for its rate limit
# (429), or went silent past the timeout. Each error code's condition is the brain's
# `clients/fallback.py`; any other failure (a bad request, a wrong key) never switches.
FallbackOn = Literal["error", "rate_limit", "timeout"]
FALLBACK_ON: tuple[FallbackOn, ...] = ("error", "rate_limit", "timeout")


class ModelChoice(BaseModel):
    """One entry of an agent's fallback chain: the model to ask when the one before it
    failed for one of the reasons in `when`. `model` None: the provider's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str = Field(min_length=1, max_length=200)
    model: str | None = Field(default=None, min_length=1, max_length=200)
    when: list[FallbackOn] = Field(default_factory=lambda: list(FALLBACK_ON), min_length=1)

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider


INSTRUCTIONS_CHARS = 8000  # an agent's instructions, as written
PREFETCH_CALLS = 10  # the most tool calls an agent's prefetch holds
PREFETCH_ARGUMENTS_CHARS = 8000  # one prefetch call's arguments, as JSON


class PrefetchCall(BaseModel):
    """One tool call an agent makes before its model's first turn, through the same gates
    as a model's call; string arguments may use the template variables
    (`tether_common.templating`), filled when the run starts."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("arguments")
    @classmethod
    def _templated(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(arguments, ensure_ascii=False)) > PREFETCH_ARGUMENTS_CHARS:
            raise ValueError(f"arguments are at most {PREFETCH_ARGUMENTS_CHARS} characters as JSON")
        templating.check_arguments(arguments)
        return arguments


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
    # Typed answers: the final answer must be a JSON object this schema accepts
    # (`tether_common.typed_answers`); one that does not is sent back with the violation
    # up to `output_repairs` times (each a step), then the run fails `output_invalid`.
    output_schema: dict[str, Any] | None = None
    output_repairs: int = Field(default=2, ge=0, le=5)
    # Text for the model only, shown after the system prompt; never read by a gate, so it
    # cannot widen what the agent may do. Templated (`tether_common.templating`).
    instructions: str | None = Field(default=None, max_length=INSTRUCTIONS_CHARS)
    # Tool calls run before the model's first turn, through the same gates as its own.
    prefetch: list[PrefetchCall] = Field(default_factory=list, max_length=PREFETCH_CALLS)
    budgets: Budgets = Field(default_factory=Budgets)
    ceilings: Budgets = Field(default_factory=Budgets)
    providers: list[str] | None = None
    models: list[str] | None = None
    # The models a turn falls back to, in order, when the run's own model fails (never
    # widening `providers`/`models`: each entry must be within both; `models` stays the
    # allow-list, this the order of preference within it).
    fallback: list[ModelChoice] = Field(default_factory=list, max_length=10)
    # Two keys: a tool pattern or `category:<name>` -> the quorum its calls need
    # (the brain's `gates/quorum.py`); such a call always asks.
    quorum: dict[str, QuorumRule] = Field(default_factory=dict, max_length=50)
    # Limits on the tokens, cost, starts and concurrent runs of this agent, per tenant
    # using it, within the tenant's own quota (`messages.quotas`; the brain's `quotas`).
    quota: Quota = Field(default_factory=Quota)

    @model_validator(mode="after")
    def _fallback_within_lists(self) -> AgentConfig:
        # Checked wherever a definition is read (the API, `agents apply`, the seeds):
        # a chain never reaches a provider or model the agent may not use.
        for index, choice in enumerate(self.fallback):
            if self.providers is not None and choice.provider not in self.providers:
                raise ValueError(
                    f"fallback[{index}]: the provider '{choice.provider}' is not in the "
                    "agent's providers"
                )
            if self.models is not None and choice.model not in self.models:
                what = f"the model '{choice.model}' is" if choice.model else "no model is named;"
                raise ValueError(f"fallback[{index}]: {what} not in the agent's models")
        return self

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, text: str | None) -> str | None:
        if text is not None:
            if any(ord(ch) < 32 and ch not in "\n\r\t" for ch in text):
                raise ValueError(
                    "instructions hold no control characters (but line breaks and tabs)"
                )
            templating.check(text)
        return text

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_output_schema(schema)

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
