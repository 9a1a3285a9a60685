"""Automated approvers: configured rules, and callables a deployment registers, that
answer a new request at once. The first approver with an answer decides; `no_opinion`
parks the request for a person. Every automated decision names its approver
(`rule:<name>` or `approver:<name>`) in `decided_by` and in the audit trail."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Literal, Protocol

from tether_approvals.settings import ApproverRule
from tether_common.errors import ConfigError
from tether_common.messages.approvals import CreateApproval

Answer = Literal["allow_once", "deny", "no_opinion"]


class AutomatedApprover(Protocol):
    """Answers a new request, or None when it has nothing to say about it."""

    @property
    def identity(self) -> str: ...

    async def __call__(self, req: CreateApproval) -> Answer | None: ...


class RuleApprover:
    """One configured rule: `tool` is a shell-style pattern; `danger`/`reach` (None: any)
    must contain the request's value."""

    def __init__(self, rule: ApproverRule) -> None:
        self.rule = rule
        self.identity = f"rule:{rule.name}"

    async def __call__(self, req: CreateApproval) -> Answer | None:
        rule = self.rule
        if not fnmatchcase(req.tool, rule.tool):
            return None
        if rule.danger is not None and req.danger not in rule.danger:
            return None
        if rule.reach is not None and req.reach not in rule.reach:
            return None
        return rule.answer


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
