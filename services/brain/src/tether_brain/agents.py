"""Agents: their grants, owner, mode and bars, from settings, with the grant changes made
through the policy API laid over them (`grant_overrides.py`); and the effective policy of
a run (a request may narrow the agent's mode, never widen it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether_brain.gates import AgentPolicy, parse_grants
from tether_brain.gates.grants import parse_grant
from tether_brain.gates.policy import CATEGORIES, Category
from tether_common.errors import NotFoundError
from tether_common.messages.runs import PermissionMode
from tether_common.patterns import PatternProblem, UserPattern, compile_pattern

MODE_RANK: dict[str, int] = {"read-only": 0, "allow-reads": 1, "allow-all": 2}
DEFAULT_AGENT = "default"


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


class AgentConfig(BaseModel):
    """One agent as configured (`TETHER_BRAIN_AGENTS`, a JSON object of these by id)."""

    model_config = ConfigDict(extra="forbid")

    grants: list[str] = Field(default_factory=list)
    owner: str | None = None
    mode: PermissionMode = "allow-reads"
    categories: list[Category] = Field(default_factory=lambda: list(CATEGORIES))
    untrusted_bar: bool = True
    waiver_lifts_taint: bool = False
    interactive: bool = False
    done: DoneRule | None = None


class Agents:
    def __init__(
        self,
        configs: dict[str, AgentConfig],
        *,
        workspace: Path,
        guardrails: dict[str, Literal["confirm", "deny"]],
        allowlist: list[str],
    ) -> None:
        self.configs = {DEFAULT_AGENT: AgentConfig()} | configs
        self.workspace = workspace
        self.guardrails = guardrails
        self.allowlist = tuple(parse_grant(rule) for rule in allowlist)
        self._effective = dict(self.configs)

    def config(self, agent_id: str | None) -> AgentConfig:
        found = self._effective.get(agent_id or DEFAULT_AGENT)
        if found is None:
            raise NotFoundError(f"no agent '{agent_id}'")
        return found

    def override_grants(self, overrides: dict[str, list[str]]) -> None:
        """Lay changed grants over the configured ones (all of them: an agent missing from
        `overrides` has its configured grants again). Unknown agents are ignored."""
        self._effective = {
            agent_id: config
            if agent_id not in overrides
            else config.model_copy(update={"grants": list(overrides[agent_id])})
            for agent_id, config in self.configs.items()
        }

    def policy(self, agent_id: str | None, options: dict[str, Any]) -> AgentPolicy:
        config = self.config(agent_id)
        mode = config.mode
        asked = options.get("mode")
        if asked in MODE_RANK and MODE_RANK[asked] < MODE_RANK[mode]:
            mode = asked
        return AgentPolicy(
            agent_id=agent_id or DEFAULT_AGENT,
            grants=parse_grants(config.grants),
            workspace=self.workspace,
            owner=config.owner,
            mode=mode,
            categories=frozenset(config.categories),
            guardrails=self.guardrails,
            allowlist=self.allowlist,
            untrusted_bar=config.untrusted_bar,
            waiver_lifts_taint=config.waiver_lifts_taint,
        )
