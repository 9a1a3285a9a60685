"""Automated approvers: configured rules, and callables a deployment registers, that
answer a new request at once. The first approver with an answer decides; `no_opinion`
parks the request for a person. Every automated decision names its approver
(`rule:<name>` or `approver:<name>`) in `decided_by` and in the audit trail."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Literal, Protocol

from tether_approvals.settings import ApproverRule, RequestMatch
from tether_common.errors import ConfigError
from tether_common.messages.approvals import CreateApproval

Answer = Literal["allow_once", "deny", "no_opinion"]


class AutomatedApprover(Protocol):
    """Answers a new request, or None when it has nothing to say about it."""

    @property
    def identity(self) -> str: ...

    async def __call__(self, req: CreateApproval) -> Answer | None: ...


def matches(rule: RequestMatch, req: CreateApproval) -> bool:
    """`tool` is a shell-style pattern; every list given (None: any) holds the request's
    value (a request without an agent, scope or effect matches no list of them)."""
    if not fnmatchcase(req.tool, rule.tool):
        return False
    return all(
        wanted is None or value in wanted
        for wanted, value in (
            (rule.danger, req.danger),
            (rule.reach, req.reach),
            (rule.effect, req.effect),
            (rule.scope, req.scope),
            (rule.agent, req.agent),
        )
    )


class RuleApprover:
    """One configured rule (see `matches`)."""

    def __init__(self, rule: ApproverRule) -> None:
        self.rule = rule
        self.identity = f"rule:{rule.name}"

    async def __call__(self, req: CreateApproval) -> Answer | None:
        return self.rule.answer if matches(self.rule, req) else None


class RegisteredApprover:
    """A deployment's callable (`module:attribute`, with a `name` and an async call)."""

    def __init__(self, spec: str) -> None:
        module, _, attribute = spec.partition(":")
        try:
            self.target = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"cannot load the approver '{spec}': {exc}") from exc
        self.identity = f"approver:{getattr(self.target, 'name', attribute)}"

    async def __call__(self, req: CreateApproval) -> Answer | None:
        answer: Answer | None = await self.target(req)
        return answer


def build_approvers(
    rules: Sequence[ApproverRule], registered: Sequence[str]
) -> tuple[AutomatedApprover, ...]:
    """Rules first (in order), then registered callables (in order)."""
    return (*(RuleApprover(r) for r in rules), *(RegisteredApprover(s) for s in registered))


async def first_answer(
    approvers: Sequence[AutomatedApprover], req: CreateApproval
) -> tuple[Answer, str] | None:
    """The first answer given, with its approver's identity; a later, broader approver
    cannot overrule an earlier, narrower one (`no_opinion` included)."""
    for approver in approvers:
        answer = await approver(req)
        if answer is not None:
            return answer, approver.identity
    return None
